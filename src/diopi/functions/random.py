"""Random sampling (results are never compared by value)."""
# ruff: noqa: E501  (the table has one function per line, however long)

FAMILY = "random"

# name | packets | tags | backward function | summary
TABLE = """
diopiDropout | native_dropout | random | diopiDropoutBackward | Dropout: zero elements with probability p, scale the rest by 1/(1-p); returns the mask.
diopiDropoutBackward | native_dropout_backward | backward | | Gradient of dropout: grad * mask * scale.
diopiBernoulli | bernoulli bernoulli_ | random | | Bernoulli samples with given probabilities.
diopiNormal | normal normal_ | random | | Normal samples with given mean and std.
diopiUniform | uniform uniform_ | random | | Uniform samples in [from, to).
diopiRandom | random random_ | random | | Integer samples uniform over a range (or the dtype's range).
diopiRandperm | randperm | random | | A random permutation of 0..n-1.
diopiMultinomial | multinomial | random | | Category indices drawn from rows of probabilities, with or without replacement.
diopiExponential | exponential exponential_ | random | | Exponential samples with rate lambda.
diopiCauchy | cauchy cauchy_ | random | | Cauchy samples with given median and scale.
diopiGeometric | geometric geometric_ | random | | Geometric samples (trials to first success) with probability p.
diopiLogNormal | log_normal log_normal_ | random | | Log-normal samples: exp of normal(mean, std).
diopiPoisson | poisson | random | | Poisson samples with the given rates.
diopiBinomial | binomial | random | | Binomial samples for given counts and probabilities.
diopiStandardGamma | _standard_gamma | random | diopiStandardGammaGrad | Gamma(alpha, 1) samples (reparameterized).
diopiStandardGammaGrad | _standard_gamma_grad | backward | | Derivative of a Gamma(alpha, 1) sample with respect to alpha.
diopiSampleDirichlet | _sample_dirichlet | random | diopiDirichletGrad | Dirichlet samples with given concentrations.
diopiDirichletGrad | _dirichlet_grad | backward | | Derivative of Dirichlet samples with respect to the concentrations.
"""
