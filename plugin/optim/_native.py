"""Placeholder until the native local optimizer lands (helper branch native-optim)."""
from typing import Any, Optional


class LocalOptimizer:
    """Placeholder."""

    @staticmethod
    def why_not_native(optimizer_class: type, params: Any, *args: Any, **kwargs: Any) -> Optional[str]:
        return "the native local optimizer is not built yet"
