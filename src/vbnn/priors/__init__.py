"""Priors over layer weights, one module each, and the table of their KLs (``priors.kl``).

Importing the package registers every prior's KL entries.
"""

from vbnn.priors.ard import ARDPrior
from vbnn.priors.gaussian import GaussianPrior
from vbnn.priors.kl import kl_divergence, register_kl
from vbnn.priors.log_uniform import KLEstimator, LogUniformPrior
from vbnn.priors.student_t import StudentTPrior

__all__ = [
    "ARDPrior",
    "GaussianPrior",
    "KLEstimator",
    "LogUniformPrior",
    "StudentTPrior",
    "kl_divergence",
    "register_kl",
]
