"""The public surface of the project, enumerated once for the API tests.

Public means: the packages ``plugin`` and ``functional_optim`` and their submodules whose
names do not start with an underscore; in each, the names listed in ``__all__``; in each
public class, the attributes its own body defines whose names do not start with an
underscore (methods, class methods, properties, constants), and those of its base classes
defined in a private module of the project (a mixin that two public classes share, such as
``functional_optim._torch_face.TorchOptimizerFace``: each public class is their home). Other
inherited members are left out (``ScriptLocalOptimizer`` is an ``nn.Module``; ``nn.Module``'s
API is torch's).

The op library adds the ``torch.ops.gilfree_rpc`` op schemas and the custom class
``torch.classes.gilfree_rpc.StepLock``.
"""
import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch

PACKAGES = ("plugin", "functional_optim")
OP_NAMESPACE = "gilfree_rpc"


@dataclass
class PublicName:
    """One public name: ``qualname`` (``module.name`` or ``module.Class.member``)."""

    qualname: str
    obj: Any
    kind: str  # "module", "submodule" (a module named in __all__), "class", "function", "method", "classmethod", "staticmethod", "property", "data"
    owner: Optional[type] = None  # the class, for members

    @property
    def function(self):
        """The plain function behind a function-like name (None for others)."""
        if self.kind in ("function", "method"):
            return self.obj
        if self.kind in ("classmethod", "staticmethod"):
            return self.obj.__func__
        if self.kind == "property":
            return self.obj.fget
        return None


@functools.lru_cache(maxsize=None)
def public_modules() -> Tuple[str, ...]:
    """Every public module name, sorted: the packages and their public submodules."""
    names = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.iter_modules(module.__path__):
            if not info.name.startswith("_"):
                names.append(f"{package}.{info.name}")
    return tuple(sorted(names))


def _member_kind(raw: Any) -> Optional[str]:
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, property):
        return "property"
    if inspect.isfunction(raw):
        return "method"
    return None


def _private_project_base(base: type) -> bool:
    module = base.__module__
    return module.split(".")[0] in PACKAGES and module not in public_modules()


def class_members(cls: type, prefix: str) -> List[PublicName]:
    """The public attributes that ``cls``'s own body defines, or a base class of the project's
    private modules (a shared mixin) does, sorted by name."""
    own = {}
    for base in reversed(cls.__mro__):
        if base is cls or _private_project_base(base):
            own.update(vars(base))
    members = []
    for name, raw in sorted(own.items()):
        if name.startswith("_"):
            continue
        kind = _member_kind(raw)
        if kind is None:
            if inspect.isclass(raw) or callable(raw):
                raise AssertionError(f"{prefix}.{name}: unexpected public member type {type(raw).__name__}")
            kind = "data"
        members.append(PublicName(f"{prefix}.{name}", raw, kind, cls))
    return members


def public_names() -> List[PublicName]:
    """Every public module, module-level name and class member, in a stable order."""
    result = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        result.append(PublicName(module_name, module, "module"))
        exported = getattr(module, "__all__", None)
        if exported is None:
            raise AssertionError(f"{module_name} has no __all__: say what is public")
        for name in sorted(exported):
            obj = getattr(module, name)
            qualname = f"{module_name}.{name}"
            if inspect.ismodule(obj):
                result.append(PublicName(qualname, obj, "submodule"))
            elif inspect.isclass(obj):
                item = PublicName(qualname, obj, "class")
                result.append(item)
                if canonical(item):  # a re-export's members are listed where it is defined
                    result.extend(class_members(obj, qualname))
            elif callable(obj):
                result.append(PublicName(qualname, obj, "function"))
            else:
                result.append(PublicName(qualname, obj, "data"))
    return result


def canonical(item: PublicName) -> bool:
    """Whether ``item`` is where its object is defined (not a re-export of it).

    ``functional_optim.Adam`` is a re-export of ``functional_optim.adam.Adam``; both are
    public names, but docstring checks need to look at each object once.
    """
    if item.kind not in ("class", "function"):
        return True
    module_name = item.qualname.rsplit(".", 1)[0]
    defined_in = getattr(item.obj, "__module__", module_name)
    # defined in a private module (plugin._device_maps): this public name is its home
    return defined_in == module_name or defined_in not in public_modules()


def op_schemas() -> List[str]:
    """``torch.ops.gilfree_rpc`` op schemas, as TorchScript prints them, sorted."""
    import plugin  # noqa: F401  (loads the op library)

    return sorted(str(s) for s in torch._C._jit_get_all_schemas() if s.name.startswith(OP_NAMESPACE + "::"))


def custom_class_schemas() -> List[str]:
    """Method schemas of the ``torch.classes.gilfree_rpc`` custom classes, sorted."""
    import plugin  # noqa: F401

    marker = f"__torch__.torch.classes.{OP_NAMESPACE}."
    return sorted(str(s) for s in torch._C._jit_get_custom_class_schemas() if marker in str(s))
