"""Matrix multiplication and linear algebra."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "matmul"

# name | packets | tags | backward function | summary
TABLE = """
diopiMm | mm | matmul | | Matrix product of two 2-D tensors.
diopiBmm | bmm | matmul | | Batched matrix product of two 3-D tensors.
diopiAddmm | addmm addmm_ | matmul | | beta * input + alpha * (mat1 @ mat2), the core of a linear layer.
diopiBaddbmm | baddbmm baddbmm_ | matmul | | beta * input + alpha * (batch1 @ batch2), batched.
diopiMv | mv | matmul | | Matrix-vector product.
diopiDot | dot vdot | matmul | | Inner product of two 1-D tensors (vdot conjugates the first).
diopiAddmv | addmv addmv_ | matmul | | beta * input + alpha * (mat @ vec).
diopiAddr | addr addr_ | matmul | | beta * input + alpha * outer(vec1, vec2).
diopiAddbmm | addbmm addbmm_ | matmul | | beta * input + alpha * sum over the batch of batch1[i] @ batch2[i].
diopiAddmmActivation | _addmm_activation | matmul | | addmm followed by ReLU or tanh-GELU, fused (linear + activation).
diopiLinear | linear | matmul | | A linear layer, input @ weight^T + bias, as one kernel (claimed before decomposition).
diopiCdist | _cdist_forward | matmul | diopiCdistBackward | Pairwise p-norm distances between two sets of row vectors.
diopiCdistBackward | _cdist_backward | matmul backward | | Gradient of cdist for its first input.
diopiPdist | _pdist_forward | | diopiPdistBackward | p-norm distances between every pair of rows of one matrix (upper triangle).
diopiPdistBackward | _pdist_backward | backward | | Gradient of pdist.
diopiLinalgCross | linalg_cross | | | Cross product of 3-vectors along a dimension, broadcast.
diopiCholesky | linalg_cholesky_ex cholesky | | | Cholesky factor of symmetric positive-definite matrices, with an info code.
diopiCholeskySolve | cholesky_solve _cholesky_solve_helper | | | Solve A X = B given the Cholesky factor of A.
diopiCholeskyInverse | cholesky_inverse | | | Inverse of A given its Cholesky factor.
diopiInv | linalg_inv_ex | | | Inverse of square matrices, with an info code.
diopiLinalgSolve | _linalg_solve_ex | | | Solve A X = B through an LU factorization (also returns LU and pivots).
diopiLuFactor | linalg_lu_factor_ex | | | LU factorization with partial pivoting (packed LU and pivots).
diopiLu | linalg_lu | | | LU factorization as explicit P, L, U.
diopiLuSolve | linalg_lu_solve | | | Solve A X = B from a packed LU factorization.
diopiLuUnpack | lu_unpack | | | Unpack packed LU and pivots into P, L, U.
diopiQr | linalg_qr | | | QR decomposition (reduced, complete or R only).
diopiSvd | _linalg_svd | | | Singular value decomposition (values, optionally vectors).
diopiEigh | _linalg_eigh | | | Eigenvalues and eigenvectors of symmetric matrices.
diopiDet | _linalg_det | | | Determinant (with the LU factorization it comes from).
diopiSlogdet | _linalg_slogdet | | | Sign and log of the absolute determinant.
diopiTriangularSolve | triangular_solve linalg_solve_triangular | | | Solve a triangular system A X = B (left or right).
diopiMatrixExp | linalg_matrix_exp | | | Matrix exponential of square matrices.
"""
