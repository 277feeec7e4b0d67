"""The distributed optimizer (:class:`plugin.optim.DistributedOptimizer`). Its two step protocols
are each written once here, over the one owner interface of ``_owners.py``: the all-or-nothing
step (:meth:`~DistributedOptimizer.step`, :meth:`~DistributedOptimizer.step_async`) and the step
inside the backward pass (:meth:`~DistributedOptimizer.backward_and_step`). Both bound every
owner's part by the one deadline rule (``_owners.deadline_ms``) and read its outcome in the one
status table (``_status.py``, the op library's).
"""
from collections import OrderedDict
from typing import Any, Dict, List, Optional

import torch
import torch.distributed.rpc as rpc
from torch import Tensor
from torch.distributed.rpc import RRef

from functional_optim.configuration import check_group_index
from functional_optim.torch_optimizer import TorchOptimizerFace

from .. import ops
from . import _local, _param_groups
from ._owners import (
    STATUS_TEXT, Owner, check_context, check_rrefs, deadline_ms, gather, lease_ms,
    owners_of, raise_failures, send_python, wait_all,
)
from ._python import uses_python_step, warn_once
from ._status import APPLIED, LATE, NOT_REACHED, REFUSED

__all__ = ["DistributedOptimizer"]


class DistributedOptimizer(TorchOptimizerFace, torch.optim.Optimizer):
    """Runs an optimizer on every worker that owns some of the parameters.

    Like ``torch.distributed.optim.DistributedOptimizer``, with these differences: the
    registry's optimizers (``functional_optim``'s classes, or their ``torch.optim``
    counterparts) step natively on the owners (:class:`NativeLocalOptimizer`: C++, the op library's
    group steps), so no owner takes its GIL for a step or any other call, and nothing depends
    on TorchScript; any other ``torch.optim.Optimizer`` subclass, and a built-in optimizer in a
    configuration without the fused implementation, steps in Python on the owners
    (:class:`PythonLocalOptimizer`, as torch's ``_LocalOptimizer``), holding their GIL, with a
    :class:`PythonStepWarning` once per class that says why; a functional class the user
    registered steps as TorchScript (:class:`ScriptLocalOptimizer`) where torch still
    compiles it. Gradients come from the plugin's engine (``plugin.autograd.backward``) or from
    torch's (``torch.distributed.autograd.backward``); the optimizer state can be saved and
    restored with :meth:`state_dict` and :meth:`load_state_dict`; and it is a
    ``torch.optim.Optimizer``, whose :attr:`param_groups` ``torch.optim.lr_scheduler`` classes
    read and write (what they write reaches every owner before the next step).
    :func:`clip_grad_norm_` clips its gradients across owners.

    Guarantees (details in the "Failures and guarantees" page of the documentation):

    * Steps of any local optimizers that share a parameter never interleave on it, whatever
      their parameter sets (one lock per parameter on each owner, taken in one global order);
      there is no ordering across owners, and no promise that a trainer's forward, backward
      and step run without other trainers' steps in between.
    * :meth:`step` and :meth:`step_async` apply the context's gradients on every owner or
      raise; a gradient that one owner rejects changes no owner (unless the gradients or
      parameters change between the backward pass and the step: then the error lists the
      owners that applied).
    * A step, :meth:`state_dict` or another call that an owner does not answer (dead or
      frozen) raises after the RPC timeout, naming that owner; an owner's part of a step that
      reaches it after half the RPC timeout applies nothing.

    Args:
        optimizer_class (type): a ``functional_optim`` class (``functional_optim.Adam``) or its
            ``torch.optim`` counterpart (``torch.optim.Adam``); a class registered with
            :func:`functional_optim.register_functional_optimizer` (TorchScript, where torch
            compiles it); or any other ``torch.optim.Optimizer`` subclass (Python).
        params_rref (List[RRef[Tensor]]): the parameters to optimize, local or remote, each an
            RRef to a Tensor (for instance ``module_rref.rpc_sync().parameter_rrefs()``).
        *args: the optimizer's positional hyperparameters, as for ``torch.optim``.
        **kwargs: its keyword hyperparameters (``lr=...``, ``betas=...``).

    Raises:
        TypeError: ``params_rref`` is empty or holds something that is not an RRef.
        KeyError: ``optimizer_class`` has no functional counterpart and is not a
            ``torch.optim.Optimizer`` subclass (the message lists the registered classes).
        Exception: building the local optimizer failed on an owner (invalid hyperparameters,
            an RRef that does not hold a Tensor, ...): the owner's exception type
            (``ValueError``, ``TypeError``...; ``RuntimeError`` when it cannot be rebuilt), its
            message, naming the owner.

    Algorithm: torch's DistributedOptimizer (``torch/distributed/optim/optimizer.py``), with
    native local optimizers in place of its ``_ScriptLocalOptimizer`` for the registered
    optimizers, torch's ``_LocalOptimizer`` (:class:`PythonLocalOptimizer`) for the other
    ``torch.optim.Optimizer`` subclasses, and an all-or-nothing step over several owners.
    """

    def __init__(self, optimizer_class: type, params_rref: List[RRef], *args: Any, **kwargs: Any) -> None:
        params_rref = list(params_rref)
        if not params_rref:
            raise TypeError("DistributedOptimizer: params_rref is empty")
        check_rrefs(params_rref, "DistributedOptimizer: params_rref")
        if uses_python_step(optimizer_class):  # KeyError before any RPC
            warn_once(optimizer_class, "it has no functional counterpart", stacklevel=2)
        self._optimizer_class = optimizer_class
        _local.prepare_caller(optimizer_class)

        self._indices = by_owner = owners_of(params_rref)
        futures = OrderedDict(
            (owner, send_python(owner, _local.build, (optimizer_class, [params_rref[i] for i in indices], args, kwargs)))
            for owner, indices in by_owner.items()
        )
        built = wait_all(futures, "building the local optimizer")
        self._owners: "OrderedDict[str, Owner]" = OrderedDict(
            (owner, Owner(owner, b.kind, b.rref, b.handle, b.accepts_sparse)) for owner, b in built.items()
        )
        # the owners' RPC worker ids, for what the backward pass reports (see step)
        self._owner_ids = [rpc.get_worker_info(owner).id for owner in self._owners]
        reasons = OrderedDict((owner, b.reason) for owner, b in built.items() if b.kind == "python" and b.reason)
        if reasons and not uses_python_step(optimizer_class):
            owner, reason = next(iter(reasons.items()))
            warn_once(optimizer_class, f"{reason} (on owner {owner!r})", stacklevel=2)
        self._init_torch_optimizer(params_rref)

    @property
    def owners(self) -> List[str]:
        """Names of the workers that hold a local optimizer, in order of first parameter."""
        return list(self._owners)

    @property
    def local_optimizer_kinds(self) -> Dict[str, str]:
        """Each owner's kind of local optimizer: ``"native"`` (:class:`NativeLocalOptimizer`: C++, no
        GIL), ``"python"`` (:class:`PythonLocalOptimizer`: the owner's GIL) or
        ``"torchscript"`` (:class:`ScriptLocalOptimizer`), by owner name."""
        return OrderedDict((name, owner.kind) for name, owner in self._owners.items())

    # --- the all-or-nothing step ----------------------------------------------------------------

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on every owner.

        Each owner reads its parameters' gradients in that context on its own side and steps
        its local optimizer, holding its parameters' locks (see :class:`NativeLocalOptimizer`). A
        parameter without a gradient in the context is skipped, as in torch; an owner that no
        backward pass of the context reached skips all of its parameters.

        All or nothing, by one protocol in two forms:

        * **one round trip** with one owner, or when the gradients are vouched for: the plugin's
          engine ran the context's latest backward pass from this worker, and each worker
          checked, as its part of the pass ended, that every gradient there fits its parameter
          (the parameter's shape, dtype and device; dense, or sparse COO, which the step takes
          only when its optimizer does) and told this worker. If the pass reached every owner,
          each found its gradients fit, and every owner's local optimizer is native, the caller
          sends the step to every owner at once and each applies it, only if its gradients did
          not change since the check. An owner lost after the pass then leaves the others
          applied, named in the error.
        * **two phases** otherwise (torch's engine ran the backward, an owner the pass did not
          reach or where the engine holds no gradient, a failed pass, a Python or TorchScript
          local optimizer): phase 1 on every owner reads, validates and keeps the gradients;
          only when every owner succeeded, phase 2 applies them. A gradient that one owner
          rejects changes no owner; an owner that dies or freezes between the phases makes the
          step raise, naming it and listing the owners that applied it.

        Either way an owner applies only before a deadline of half the RPC timeout on its
        system clock, so an owner frozen past it and resumed applies nothing.

        Args:
            context_id (int): the distributed autograd context whose gradients to apply: live
                on this worker (step inside its ``with`` block), its backward pass ended.

        Raises:
            RuntimeError: ``context_id`` is not a live context on this worker; or a step
                failed or did not answer within the RPC timeout on an owner (every such owner
                is named in the message, and whether other owners applied the step).
            ValueError: an owner rejected a gradient's shape, dtype or device (no owner changed;
                when some owners applied, a ``RuntimeError`` listing them instead).
        """
        what = f"step({context_id})"
        check_context(context_id, f"DistributedOptimizer: {what}", "call it")
        self._push_tensor_changes()
        versions = self._checked_versions(context_id)
        if versions or len(self._owners) == 1:
            self._checked_step(context_id, versions or [-1], what)
        else:
            self._report(self._commit(self._prepare(context_id, what)), what)

    def _checked_step(self, context_id: int, versions: List[int], what: str) -> None:
        """The one round trip: every owner checks and applies at once, each only if its
        gradients are still those the pass checked (``versions``, in the owners' order; -1 for
        a lone owner's own check) and only before the deadline."""
        deadline = deadline_ms()
        futures = OrderedDict(
            (name, owner.step(context_id, versions[i], deadline)) for i, (name, owner) in enumerate(self._owners.items())
        )
        self._report(futures, what)

    def _checked_versions(self, context_id: int) -> List[int]:
        """Each owner's version of the context's gradients as the plugin's backward pass
        checked them (``ops._checked_versions``), when every owner is native; else ``[]``."""
        if not all(owner.native for owner in self._owners.values()):
            return []
        accept_sparse = all(owner.accepts_sparse for owner in self._owners.values())
        return ops._checked_versions(context_id, self._owner_ids, accept_sparse)

    def _prepare(self, context_id: int, what: str) -> "OrderedDict[str, int]":
        """Phase 1 on every owner at once; on any failure drops what the others prepared and
        raises. Returns each owner's token."""
        lease = lease_ms()
        futures = OrderedDict((name, owner.prepare(context_id, lease)) for name, owner in self._owners.items())
        tokens, failures = gather(futures)
        if failures:
            for name, token in tokens.items():  # not waited for: the lease bounds them anyway
                self._owners[name].drop(token)
            raise_failures(failures, what, "; no owner applied the step")
        return tokens

    def _commit(self, tokens: "OrderedDict[str, int]") -> "OrderedDict[str, torch.futures.Future]":
        """Phase 2 on every owner at once, before the deadline."""
        deadline = deadline_ms()
        return OrderedDict((name, self._owners[name].commit(token, deadline)) for name, token in tokens.items())

    @staticmethod
    def _report(futures: "OrderedDict[str, torch.futures.Future]", what: str) -> None:
        """Waits for the owners' parts of a step that applies (the caller waits at most the RPC
        timeout) and raises unless every owner applied, naming the owners that did not and
        those that did."""
        statuses, failures = gather(futures)
        applied = [name for name, status in statuses.items() if status == APPLIED]
        refused = OrderedDict((name, status) for name, status in statuses.items() if status != APPLIED)
        if not failures and not refused:
            return
        lost = [f.owner for f in failures if f.kind in ("timeout", "unreachable")]
        outcome = f"the step was applied on owners {applied}" if applied else "no owner applied the step"
        if lost:
            outcome += (f" and not confirmed on {lost} (an owner that did not answer in time may have applied it "
                        f"before its deadline, half the RPC timeout after the step was sent, or before it died)")
        parts = [outcome] + [f"owner {name!r} refused it: {STATUS_TEXT[status]}" for name, status in refused.items()]
        detail = "; " + "; ".join(parts)
        if failures:
            # when some owners changed: never the error type of a step that changed none
            raise_failures(failures, what, detail, RuntimeError if applied or lost else None)
        raise RuntimeError(f"DistributedOptimizer: {what} failed on owners {list(refused)}{detail}")

    def step_async(self, context_id: int) -> torch.futures.Future:
        """Starts :meth:`step`; returns once every owner holds the step's gradients.

        Runs phase 1 of the two-phase step (see :meth:`step`) and waits for it: every owner has
        read and validated the context's gradients and keeps them, so the context may be
        released (the ``with`` block may exit) as soon as this returns. Phase 2, the update, runs
        after the return. Costs one round trip to the owners before returning; waits for no lock.

        Args:
            context_id (int): the distributed autograd context whose gradients to apply; it
                must be live on this worker until this returns.

        Returns:
            torch.futures.Future: completes with ``None`` when every owner has applied the
            step, or with the error :meth:`step` would raise (raised by ``wait()``).

        Raises:
            RuntimeError: ``context_id`` is not a live context on this worker, or RPC is not
                running (raised at once; owners' errors go to the future).
        """
        what = f"step({context_id})"
        check_context(context_id, f"DistributedOptimizer: {what}", "call it")
        self._push_tensor_changes()
        done = torch.futures.Future()
        try:
            tokens = self._prepare(context_id, what)
        except Exception as e:  # noqa: BLE001 (handed to the future)
            done.set_exception(e)
            return done
        futures = self._commit(tokens)

        def finish(_):
            try:
                self._report(futures, what)
                done.set_result(None)
            except Exception as e:  # noqa: BLE001 (handed to the future)
                done.set_exception(e)

        torch.futures.collect_all(list(futures.values())).then(finish)
        return done

    # --- the step inside the backward pass --------------------------------------------------

    def backward_and_step(self, context_id: int, roots: List[Tensor], retain_graph: bool = False,
                          mode: str = "smart") -> None:
        """Runs the distributed backward pass from ``roots`` and takes the step inside it.

        What ``plugin.autograd.backward(context_id, roots, retain_graph, mode)`` followed by
        :meth:`step` does, in one pass and with no message of the step's own: each owner
        applies its local optimizer's step to the context's gradients there as soon as its
        part of the pass has ended (every gradient it expects has arrived and been
        accumulated, so they are final), on the thread that ended it, natively, without its
        GIL; the caller's own part, if it is an owner, once the pass has ended everywhere. A
        multi-owner :meth:`step` costs one or two round trips to every owner after the pass;
        this costs none. It is torch's optimizer-in-backward pattern
        (``torch.distributed.optim._apply_optimizer_in_backward``) across workers.

        What it promises, and what it does not:

        * On return, every owner the pass reached has applied the step, as :meth:`step`
          would have (a parameter without a gradient skipped; an owner the pass did not reach
          skips all of its parameters).
        * Per owner, not all or nothing: an owner whose optimizer refuses its gradients (the
          check :meth:`step` makes, before anything changes there) or that reaches its step
          after the deadline (half the RPC timeout after the call, as :meth:`step`'s) applies
          nothing, and the others keep what they applied; the error names both. Use
          :meth:`step` after ``plugin.autograd.backward`` where one owner's bad gradient must
          change no owner.
        * When the pass itself fails (a worker raises, dies or freezes), the
          :class:`~plugin.autograd.BackwardError` of ``plugin.autograd.backward`` is raised,
          naming that worker, with a note that owners whose part had ended before the
          failure may have applied the step.
        * Owners whose local optimizer is not native (Python or TorchScript) cannot step
          inside the pass: then this is ``plugin.autograd.backward`` followed by :meth:`step`
          (all or nothing, as there).

        Args:
            context_id (int): the distributed autograd context of the forward pass, live on
                this worker (call inside its ``with`` block).
            roots (List[Tensor]): scalar tensors (one element, any floating dtype and
                device) that require grad (the losses); each gets the gradient 1 (see
                ``plugin.autograd.backward``).
            retain_graph (bool): keep the graph for another pass. Default: ``False``.
            mode (str): the engine's mode, ``"smart"`` (default) or ``"fast"`` (see
                ``plugin.autograd.backward``).

        Raises:
            TypeError, ValueError: bad arguments, as ``plugin.autograd.backward`` (nothing
                ran).
            RuntimeError: ``context_id`` is not a live context on this worker (nothing ran);
                the pass failed (``BackwardError``, see above); or some owner refused its
                gradients or was late, while another applied (the owners that applied, and each
                refusing owner's error, are named).
            ValueError: every owner that took part refused its gradients (none applied): the
                first owner's error, of its type, naming it, as :meth:`step` raises.

        Algorithm: the steps of :meth:`step`, applied where the plugin's engine ends each
        owner's part of the pass (``plugin/csrc/optim/part_end_hook.h``).
        """
        from .. import autograd

        autograd._check_backward_arguments(context_id, roots, retain_graph, mode, "backward_and_step")
        what = f"backward_and_step({context_id})"
        check_context(context_id, f"DistributedOptimizer: {what}", "call it")
        self._push_tensor_changes()
        if not all(owner.native for owner in self._owners.values()):
            autograd.backward(context_id, list(roots), retain_graph, mode)
            self.step(context_id)
            return
        steps = [deadline_ms()]
        for worker_id, owner in zip(self._owner_ids, self._owners.values()):
            steps += [worker_id, owner.handle]
        try:
            autograd._backward_raising_backward_errors(context_id, list(roots), retain_graph, mode, steps)
        except RuntimeError as error:
            error.add_note(f"DistributedOptimizer: {what}: owners whose part of the pass had ended before it failed "
                           f"may have applied the step (any of {list(self._owners)})")
            raise
        outcomes = OrderedDict(zip(self._owners, ops._step_outcomes(context_id, self._owner_ids)))
        if all(o in (APPLIED, NOT_REACHED) for o in outcomes.values()):
            return
        applied = [n for n, o in outcomes.items() if o == APPLIED]
        late = [n for n, o in outcomes.items() if o == LATE]
        refused = [n for n, o in outcomes.items() if o == REFUSED]
        outcome = f"the step was applied on owners {applied}" if applied else "no owner applied the step"
        if late:
            outcome += f"; owners {late} reached their step after its deadline and applied nothing"
        if refused:
            # The owner's reason: the check its optimizer made, made again on the usual path
            # (phase 1 of a step, which changes nothing; a token it gives is dropped).
            lease = lease_ms()
            tokens, failures = gather(OrderedDict((n, self._owners[n].prepare(context_id, lease)) for n in refused))
            for name, token in tokens.items():
                self._owners[name].drop(token)
            if failures:
                raise_failures(failures, what, f"; {outcome}", RuntimeError if applied or late else None)
            outcome += f"; owners {refused} refused their gradients in the pass"
        raise RuntimeError(f"DistributedOptimizer: {what} failed on owners {late + refused}; {outcome}")

    # --- state --------------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Every owner's optimizer state in one ``torch.optim``-format dict.

        Returns:
            Dict[str, Any]: ``{'state': {i: {...}}, 'param_groups': [{..., 'params': [0, .., N-1]}]}``,
            where ``i`` is the position of the parameter in ``params_rref``: the dict a
            ``torch.optim`` optimizer over the same parameters, in the same order, would save.
            The tensors are copies, on the owners' devices.

        Raises:
            RuntimeError: an owner failed, or did not answer within the RPC timeout (named in
                the message; every owner is waited for, at most the RPC timeout), or the
                owners' hyperparameters differ.
        """
        local = wait_all(OrderedDict((name, owner.state()) for name, owner in self._owners.items()), "state_dict()")
        state: Dict[int, Dict[str, Tensor]] = {}
        group: Optional[Dict[str, Any]] = None
        for owner, indices in self._indices.items():
            sd = local[owner]
            for local_index, entry in sd["state"].items():
                state[indices[int(local_index)]] = entry
            owner_group = {k: v for k, v in sd["param_groups"][0].items() if k != "params"}
            if group is None:
                group = owner_group
            elif owner_group != group:
                raise RuntimeError(
                    f"DistributedOptimizer: the hyperparameters of owner {owner!r} differ from the others'"
                )
        total = sum(len(i) for i in self._indices.values())
        for key, value in self._param_group_extras().items():  # a scheduler's 'initial_lr', ... as torch.optim saves them
            group.setdefault(key, value)
        return {"state": dict(sorted(state.items())), "param_groups": [dict(group, params=list(range(total)))]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores a state saved by :meth:`state_dict` (or by a ``torch.optim`` optimizer over
        the same parameters in the same order) on every owner.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {i: {key: Tensor}}, 'param_groups': [one group]}``
                with ``i`` the position in ``params_rref``; tensors are copied to each owner and
                cast to its parameter's dtype and device.

        Raises:
            ValueError: the dict does not have one parameter group of ``len(params_rref)``
                parameters, or its hyperparameters are invalid (checked before anything is
                sent, for native owners), or an owner rejected a state tensor's shape (named).
            RuntimeError: an owner failed (named in the message); that owner is left unchanged.
        """
        groups = state_dict.get("param_groups")
        total = sum(len(i) for i in self._indices.values())
        if not isinstance(groups, list) or len(groups) != 1:
            raise ValueError("DistributedOptimizer.load_state_dict: expected exactly one parameter group")
        if len(groups[0].get("params", ())) != total:
            raise ValueError(
                f"DistributedOptimizer.load_state_dict: the parameter group has {len(groups[0].get('params', ()))} "
                f"parameters, this optimizer {total}"
            )
        saved_ids = list(groups[0]["params"])
        hyper = {k: v for k, v in groups[0].items() if k != "params"}
        self._check_first(lambda h, o: _local.check_group_update(self._optimizer_class, h, o, hyper))
        futures = OrderedDict()
        for owner, indices in self._indices.items():
            local_state = {
                n: state_dict["state"][saved_ids[i]] for n, i in enumerate(indices) if saved_ids[i] in state_dict["state"]
            }
            local_sd = {"state": local_state, "param_groups": [dict(hyper, params=list(range(len(indices))))]}
            futures[owner] = self._owners[owner].load_state(local_sd)
        self._note_accepts_sparse(wait_all(futures, "load_state_dict()"))
        # torch.optim takes the saved group's keys wholesale: keep those the owners do not hold
        self._forget_param_groups(extras=hyper)

    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        """Sets a numeric hyperparameter (``"lr"``, ``"weight_decay"``, ...) of param group
        ``group`` on every owner, from the next step on; for learning-rate schedules
        (``set_hyperparameter(0, "lr", 0.01)``: the signature of every optimizer of this project,
        ``functional_optim``'s state protocol included).

        Args:
            group (int): the param group, from 0: a distributed optimizer has one,
                ``param_groups[0]``.
            name (str): a hyperparameter name of the optimizer (functional names:
                tuples split, betas as ``"beta1"``, ``"beta2"``).
            value (float): the new value, in the units of the constructor's argument.

        Raises:
            ValueError: no such group, the name is unknown or the value invalid (checked
                before anything is sent: the group here, the name and value for native owners;
                otherwise the first owner that rejected it is named).
            RuntimeError: an owner failed (named).
        """
        check_group_index(group, 1)
        self._set_group({name: float(value)}, {}, f"set_hyperparameter({group}, {name!r})")
        self._forget_param_groups()

    def _check_first(self, check: Any) -> None:
        """``check(hparams, options)`` with a native owner's current group values (functional
        names): the new values checked as the optimizer's own ``set_group`` or
        ``load_state_dict`` checks them, before anything is sent (every owner checks again);
        nothing when no owner is native (the owners check)."""
        native = next((owner for owner in self._owners.values() if owner.native), None)
        if native is None:
            return
        hparams, options = _param_groups.functional_values(
            wait_all(OrderedDict([(native.name, native.hyperparameters())]), "reading the hyperparameters")[native.name]
        )
        check(hparams, options)

    def _set_group(self, hparams: Dict[str, Any], options: Dict[str, Optional[bool]], what: str) -> None:
        """Sets hyperparameters (functional names; numbers, or 1-element Tensors to follow) and
        flags on every owner; returns when all have them. Checked first, before anything is
        sent, when an owner is native."""
        numbers = {name: float(value) for name, value in hparams.items()}  # (a Tensor: its value)
        try:
            self._check_first(
                lambda h, o: _local.check_group(self._optimizer_class, dict(h, **numbers), dict(o, **options)))
        except (ValueError, TypeError, RuntimeError) as e:
            raise type(e)(f"DistributedOptimizer: {what}: {e} (checked before anything was sent; no owner "
                          f"changed)") from e
        futures = OrderedDict((name, owner.set_group(hparams, options)) for name, owner in self._owners.items())
        self._note_accepts_sparse(wait_all(futures, what))

    def _note_accepts_sparse(self, answers: "OrderedDict[str, Any]") -> None:
        """Native owners answer a change of hyperparameters or state with whether their local
        optimizer now takes sparse gradients (Adagrad's weight_decay, SGD's fused flag change
        it), which decides whether the backward pass can vouch for a pass that found sparse ones."""
        for name, answer in answers.items():
            if self._owners[name].native:
                self._owners[name].accepts_sparse = bool(answer)

    # --- the torch.optim.Optimizer face (for torch.optim.lr_scheduler); see _param_groups.py ---
    # (zero_grad, add_param_group, state and the state-dict hooks: functional_optim/torch_optimizer.py)

    _STATE_ERROR = "DistributedOptimizer keeps its state on the owners; read it with state_dict()"
    _ADD_PARAM_GROUP_ERROR = "DistributedOptimizer has one parameter group; add_param_group is not supported"
    _HOOKS_ERROR = "DistributedOptimizer does not run state_dict or load_state_dict hooks"
    _PICKLE_ERROR = "a DistributedOptimizer cannot be pickled; save its state_dict() instead"

    def _init_torch_optimizer(self, params_rref: List[RRef]) -> None:
        # What torch.optim.Optimizer.__init__ sets, except param_groups and defaults (properties
        # here: the owners hold them) and state (on the owners). Optimizer.__init__ itself cannot
        # run: it takes local leaf tensors.
        self._params_rref = list(params_rref)
        self._group: Optional[_param_groups.DistributedParamGroup] = None
        self._group_extras: Dict[str, Any] = {}
        self._defaults: Optional[Dict[str, Any]] = None
        self._init_hooks()  # step() runs torch's step hooks (register_step_pre_hook ...)

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The one parameter group, as ``torch.optim`` shows it; schedulers read and write it.

        A list of one dict (a ``dict`` subclass kept in step with the owners): ``'params'`` is the
        ``params_rref`` list; the hyperparameters and flags have ``torch.optim``'s names and forms
        (``'lr'``, ``'betas'`` as a tuple, ``'maximize'``...). Assigning one
        (``opt.param_groups[0]['lr'] = 0.01``, as ``torch.optim.lr_scheduler`` does) sends it to
        every owner and returns when all have it, so the next step uses it; other keys
        (``'initial_lr'``) stay here and go into :meth:`state_dict`. Read from the owners on
        first use (one RPC per owner).

        Raises:
            RuntimeError: an owner failed to answer (named), or the owners' values differ.
        """
        if self._group is None:
            fetched = _param_groups.fetch_group(self)
            if self._defaults is None:
                self._defaults = dict(fetched["group"])
            self._group = _param_groups.DistributedParamGroup(self, self._params_rref, fetched, self._group_extras)
        return [self._group]

    @property
    def defaults(self) -> Dict[str, Any]:
        """The optimizer's hyperparameters and flags as first read from the owners, under
        ``torch.optim``'s names (what ``torch.optim.Optimizer.defaults`` holds; ``OneCycleLR``
        and ``CyclicLR`` look for ``'momentum'`` or ``'betas'`` in it).

        Raises:
            RuntimeError: as :attr:`param_groups`.
        """
        if self._defaults is None:
            self.param_groups
        return self._defaults

    def _param_group_extras(self) -> Dict[str, Any]:
        # before the group is read from the owners, the keys of a loaded state dict (the
        # optimizer's own among them: callers give the owners' values precedence)
        return self._group.extras() if self._group is not None else dict(self._group_extras)

    def _push_tensor_changes(self) -> None:
        """Before a step: the Tensor hyperparameters of :attr:`param_groups` changed in place
        since the owners had them (a scheduler's ``fill_``), sent to the owners."""
        if self._group is not None:
            self._group.push_tensor_changes()

    def _forget_param_groups(self, extras: Optional[Dict[str, Any]] = None) -> None:
        """The owners' values changed by another route: read them again at the next use."""
        self._group_extras = self._param_group_extras() if extras is None else dict(extras)
        self._group = None

    def __repr__(self) -> str:
        group = "" if self._group is None else f", param_group={ {k: v for k, v in self._group.items() if k != 'params'} }"
        return f"DistributedOptimizer(owners={self.owners}{group})"
