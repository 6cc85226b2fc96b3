"""The name the blind sets' authors imported to declare torchvision's op schemas before SGLang (their
environment's module): the same declaration as the driver's, idempotent."""

from sglang_env import declare_torchvision_ops

declare_torchvision_ops()
