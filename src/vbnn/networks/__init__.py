"""Networks: ``MLP`` of any family, ``convert`` and ``summary`` for any module, and the papers'
LeNet-5 and VGG."""

from vbnn.networks.conversion import convert
from vbnn.networks.lenet import LeNet5, LeNetConfig
from vbnn.networks.mlp import MLP
from vbnn.networks.summary import summary
from vbnn.networks.vgg import VGGConfig, VGGLike

__all__ = ["MLP", "LeNet5", "LeNetConfig", "VGGConfig", "VGGLike", "convert", "summary"]
