"""Matrix multiplication and linear algebra."""

FAMILY = "matmul"

# name | packets | tags | backward function | summary
TABLE = """
diopiMm | mm | matmul
diopiBmm | bmm | matmul
diopiAddmm | addmm addmm_ | matmul
diopiBaddbmm | baddbmm baddbmm_ | matmul
diopiMv | mv | matmul
diopiDot | dot vdot | matmul
"""
