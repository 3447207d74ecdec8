"""Gaussian variance layer: q(w) = N(0, sigma^2), information stored in the variances only.

Source: Neklyudov et al. 2019 section 3 and appendix E:

    dense (eq. 40): b_j = eps_j sqrt( sum_i a_i^2 sigma_ij^2 ),
    conv  (eq. 42): b_j = eps_j (.) sqrt( A^2 * sigma_j^2 ),

eps independent per example and output position, so E[b] = 0 exactly (plus the bias, if any), and
mean propagation (eq. 3) gives an output independent of the input. The KL to the log-uniform or ARD
prior does not depend on sigma (appendix F); it is 0 under the normalisation of
``vbnn.priors.log_uniform``. Parameter: log sigma.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import nn

from vbnn.core.contracts import ParameterRole
from vbnn.core.kernels import variance_from_log_std
from vbnn.core.randomness import ModelGenerators, NoiseSource
from vbnn.layers.shell import VariationalLayer
from vbnn.priors.kl import ZeroMeanGaussian, kl_divergence
from vbnn.priors.log_uniform import LogUniformPrior


class ZeroMean(VariationalLayer):
    """N(0, sigma^2) weights; dense, or a convolution when ``kernel_size`` is set.

    The other arguments are those of ``VariationalDropout``.

    Args:
        init_std: the marginal posterior std sigma at initialisation (None: 1 / sqrt(fan_in),
            the LeCun scale).
    """

    family_name = "zero-mean"
    has_weight_mean = False
    roles = MappingProxyType({"bias": ParameterRole.MEAN})
    default_prior: object = LogUniformPrior()

    def __init__(
        self,
        in_features: int,
        out_features: int,
        generators: ModelGenerators | torch.Generator | None = None,
        init_std: float | None = None,
        dtype: torch.dtype | None = None,
        **shell,
    ) -> None:
        super().__init__(in_features, out_features, generators, **shell)
        if init_std is not None and not init_std > 0:
            raise ValueError(f"ZeroMean: init_std must be > 0, got {init_std}")
        self.point_bias(dtype)
        dtype = dtype or torch.get_default_dtype()
        shape = self.operator.weight_shape(self.num_models)
        if init_std is None:
            init_std = 1.0 / math.sqrt(self.operator.fan_in())
        # a small random spread of log sigma breaks the symmetry between output neurons
        spread = 0.1 * self.init_noise.randn(*shape[1:], dtype=dtype)
        self.weight_log_std = nn.Parameter(math.log(init_std) + spread)

    def weight_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        var = variance_from_log_std(self.weight_log_std)
        return torch.zeros_like(var), var

    def sample_weight(self, noise: NoiseSource) -> torch.Tensor:
        std = self.weight_log_std.exp()
        return std * noise.randn(*std.shape[1:], dtype=std.dtype, device=std.device)

    def kl(self, prior: object) -> torch.Tensor:
        return kl_divergence(ZeroMeanGaussian(self.weight_log_std.exp()), prior)

    def prune_by_std(self, threshold: float) -> float:
        """Zero every weight with sigma < threshold (Neklyudov et al. 2019 Fig. 5); returns the
        fraction pruned."""
        mask = self.weight_log_std.detach().exp() < threshold
        self.to_zero = mask
        return float(mask.float().mean())
