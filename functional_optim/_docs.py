"""Docstring paragraphs that every optimizer shares, written once.

Each optimizer's class and functional form writes its own text (the algorithm, its
hyperparameters, its state, its sources) and names a shared paragraph by a ``{_name}`` marker,
which :func:`fill` replaces with the text below, re-indented to the marker's column. The
markers are replaced when the module is imported, so ``help()``, Sphinx and ``__doc__`` show
the full text.
"""
from typing import Any, Dict

__all__ = ["fill", "FRAGMENTS"]

FRAGMENTS: Dict[str, str] = {
    # class docstrings, Args
    "_params_doc": (
        "params: a list of tensors, or (eagerly only) of torch-style param-group dicts\n"
        "    (``{'params': [...], 'lr': ..., ...}``). Floating-point, dense, real, leaf tensors\n"
        "    of any shape on CPU or CUDA; each at most once."
    ),
    "_common_args_doc": (
        "foreach: ``True`` multi-tensor (``torch._foreach_*``), ``False`` single-tensor, ``None``\n"
        "    the default implementation (default None).\n"
        "fused: ``True`` one fused multi-tensor kernel per step: this project's CPU kernel\n"
        "    (``torch.ops.gilfree_optim.<name>_``) or torch's (``torch._fused_<name>_``, CPU and\n"
        "    CUDA, for SGD, Adam, AdamW and Adagrad), as ``functional_optim._kernels`` chooses;\n"
        "    float32, float64, bfloat16 or float16 parameters (the last two with float32 math).\n"
        "    ``False`` never. ``None`` (default), with ``foreach`` None: fused when every\n"
        "    parameter is a dense floating-point tensor on a device with a fused kernel (CPU; CUDA\n"
        "    for torch's four), else torch's choice (multi-tensor on CUDA, else single-tensor).\n"
        "    Sparse gradients always take torch's choice. Results equal the single-tensor\n"
        "    step's up to rounding.\n"
        "maximize: maximise instead of minimising (default False).\n"
        "differentiable: must be False (the step runs under ``torch.no_grad()``)."
    ),
    "_capturable_doc": (
        "capturable: must be False (no CUDA-graph capture: the step reads ``step`` on the host)."
    ),
    "_keyword_only_doc": (
        "are keyword-only in torch; here they are positional-or-keyword because TorchScript does\n"
        "not compile keyword-only arguments with defaults. Pass them by keyword."
    ),
    "_fused_extra_doc": (
        "``fused`` (last) is not an argument of torch's class, which has no fused kernel for\n"
        "this optimizer."
    ),
    # class docstrings, Raises
    "_raises_doc": (
        "Raises:\n"
        "    ValueError: invalid hyperparameters (torch's conditions and messages, e.g.\n"
        "        ``\"Invalid learning rate: -1.0\"``), an empty, non-leaf, sparse, complex or repeated\n"
        "        parameter, ``capturable``/``differentiable`` True.\n"
        "    RuntimeError: ``fused`` with ``foreach`` or with a parameter it cannot step; at\n"
        "        ``step``, a sparse gradient it does not take (torch's message), before any change.\n"
        "    TypeError: (eagerly) a hyperparameter that is neither a number nor a Tensor, or a\n"
        "        malformed ``params``."
    ),
    # class docstrings, after the state
    "_tensor_doc": (
        "Tensor hyperparameters (eagerly, as ``torch.optim``): ``lr``, ``betas`` and the other\n"
        "numeric values may be 1-element Tensors (shape ``[]`` or ``[1]``, any real dtype, any\n"
        "device; read with ``.item()`` before each step, so an in-place change takes effect at the\n"
        "next step). torch's checks and messages apply: ``\"Tensor lr must be 1-element\"``\n"
        "(ValueError); for Adam and AdamW, no Tensor ``lr`` or ``betas`` with ``foreach=True``\n"
        "(torch's ValueError, or RuntimeError for a param group's ``lr``), and ``betas`` both\n"
        "floats or both Tensors. ``param_groups`` and ``state_dict()`` hold the Tensors themselves.\n"
        "In TorchScript the constructor takes numbers; a scripted copy of an eager optimizer\n"
        "follows its Tensors (see ``docs/functional_optimizers.md``)."
    ),
    # functional forms
    "_functional_intro_doc": (
        "Same arguments and results as torch's function of the same name in ``torch.optim``\n"
        "(without ``capturable``, ``differentiable`` and complex support). Compiles with\n"
        "TorchScript, multi-tensor and fused included."
    ),
    "_functional_args_doc": (
        "params: parameters, any shapes, floating dtypes, CPU or CUDA.\n"
        "grads: one dense gradient per parameter, same shape, dtype and device.\n"
        "state_steps: 0-dim step counters (float32, on the CPU; on the parameter's device for\n"
        "    torch's fused kernels), incremented by one here.\n"
        "foreach: ``True`` multi-tensor, ``False`` single-tensor; ``None`` (with ``fused`` None)\n"
        "    picks torch's default (multi-tensor when every parameter is on CUDA/XPU/MTIA, else\n"
        "    single-tensor)."
    ),
    "_functional_fused_doc": (
        "fused: ``True`` runs one fused kernel (see the class; all tensors on one device and of\n"
        "    one dtype: group them first, as the classes do); it counts ``state_steps`` itself.\n"
        "    ``None`` or ``False`` with ``foreach`` None: torch's default (never fused)."
    ),
    "_functional_raises_doc": (
        "Raises:\n"
        "    RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the\n"
        "        aten ops; the class checks its inputs before calling this)."
    ),
}


def _indented(text: str, column: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * column + line for line in lines[1:]])


def fill(obj: Any) -> Any:
    """Decorator: replace each ``{_name}`` marker of ``obj.__doc__`` by ``FRAGMENTS[_name]``.

    Args:
        obj: a class or function whose docstring holds markers; each marker stands alone at the
            start of its line's text, and the fragment's later lines take that indentation.

    Returns:
        ``obj`` itself, its ``__doc__`` filled in.

    Raises:
        KeyError: a marker that names no fragment.
    """
    lines = []
    for line in (obj.__doc__ or "").split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("{_") and "}" in stripped:
            key = stripped[1:stripped.index("}")]
            column = len(line) - len(stripped)
            line = line[:column] + _indented(FRAGMENTS[key], column) + stripped[stripped.index("}") + 1:]
        lines.append(line)
    obj.__doc__ = "\n".join(lines)
    return obj
