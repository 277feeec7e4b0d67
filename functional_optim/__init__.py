"""TorchScript-compatible functional optimizers (gradients passed in, never read from ``.grad``)."""
