"""Random sampling (results are never compared by value)."""

FAMILY = "random"

# name | packets | tags | backward function | summary
TABLE = """
diopiDropout | native_dropout | random
diopiDropoutBackward | native_dropout_backward | backward
diopiBernoulli | bernoulli bernoulli_ | random
diopiNormal | normal normal_ | random
diopiUniform | uniform uniform_ | random
diopiRandom | random random_ | random
diopiRandperm | randperm | random
diopiMultinomial | multinomial | random
diopiExponential | exponential exponential_ | random
"""
