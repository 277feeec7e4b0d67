"""Fuzzing the native lookups (plugin.embedding) with Hypothesis on a real RPC group: random
requests (shapes, dtypes, layouts, values with extremes: +-2**31, +-2**40, +-2**63, empty bags,
empty inputs, unknown handles) sent to the owner's op as any worker could, and through
lookup_bags_async. Each answer equals nn.EmbeddingBag's on the same table when the request
keeps every rule, and is an error of the lookup's own checks when it breaks one; the owner
answers a valid lookup after each example."""
import pytest
import torch
import torch.distributed.rpc as rpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import plugin.embedding
from plugin import _rpc_functions
from tests.support import embedding_remote as remote

NUM_EMBEDDINGS = 6
EXTREMES = [-1, NUM_EMBEDDINGS, 2**31 - 1, -(2**31), 2**31, 2**40, -(2**40), 2**63 - 1, -(2**63)]
ROW_DTYPES = [torch.int64, torch.int32]  # what the lookup takes for rows
BAD_DTYPES = [torch.int16, torch.uint8, torch.float32, torch.float64, torch.bool]


@pytest.fixture(scope="module")
def shared(cluster):
    """Two tables on worker1 (sum and mean), their handles, and local twins with the same weights."""
    handles, twins = [], []
    for i, mode in enumerate(("sum", "mean")):
        handles.append(rpc.rpc_sync("worker1", remote.make_table, args=(f"fuzz_{i}", NUM_EMBEDDINGS, 3, mode, 11 + i)))
        weight = rpc.rpc_sync("worker1", remote.weight, args=(f"fuzz_{i}",))
        twins.append(torch.nn.EmbeddingBag.from_pretrained(weight, freeze=True, mode=mode, sparse=True))
    return handles, twins


def build(values, dtype, shape, layout):
    """A tensor of `values` (Python ints, int64's range), cast to `dtype` (wrapping where it does
    not fit, as Tensor.to does), in `shape` ("1d", "2d", "0d" or "view": a strided 1-D view),
    dense or sparse."""
    t = torch.tensor(values, dtype=torch.int64)
    if shape == "view":
        t = torch.stack([t, torch.zeros_like(t)], dim=1).reshape(-1)[::2]
    t = t.to(dtype)
    if shape == "2d":
        t = t.reshape(1, -1)
    elif shape == "0d":
        t = t[0] if t.numel() else torch.zeros((), dtype=dtype)
    return t.to_sparse() if layout == "sparse" else t


@st.composite
def requests(draw):
    """(handles as table indices or a bad handle, rows, offsets, tensors, valid): one request."""
    num_tables = draw(st.integers(1, 3))
    num_bags = draw(st.integers(0, 4))
    corrupt = draw(st.booleans())
    tables, rows, offsets = [], [], []
    for _ in range(num_tables):
        tables.append(draw(st.sampled_from([0, 1])))
        n = draw(st.integers(0, 7))
        rows.append(draw(st.lists(st.integers(0, NUM_EMBEDDINGS - 1), min_size=n, max_size=n)))
        cuts = sorted(draw(st.lists(st.integers(0, n), min_size=max(num_bags - 1, 0), max_size=max(num_bags - 1, 0))))
        offsets.append(([0] + cuts) if num_bags else [])
    layout = {"rows": ["dense"] * num_tables, "offsets": ["dense"] * num_tables}
    dtype = {"rows": [draw(st.sampled_from(ROW_DTYPES)) for _ in range(num_tables)],
             "offsets": [torch.int64] * num_tables}
    shape = {"rows": [draw(st.sampled_from(["1d", "view"])) for _ in range(num_tables)],
             "offsets": [draw(st.sampled_from(["1d", "view"])) for _ in range(num_tables)]}
    if corrupt:
        for _ in range(draw(st.integers(1, 2))):
            i = draw(st.integers(0, num_tables - 1))
            what = draw(st.sampled_from(["row", "offset", "row_dtype", "offset_dtype", "shape", "sparse", "handle",
                                         "bags", "swap", "tables"]))
            if what == "row" and rows[i]:
                rows[i][draw(st.integers(0, len(rows[i]) - 1))] = draw(st.sampled_from(EXTREMES))
            elif what == "offset" and offsets[i]:
                offsets[i][draw(st.integers(0, len(offsets[i]) - 1))] = draw(st.sampled_from(EXTREMES + [1, 2]))
            elif what == "row_dtype":
                dtype["rows"][i] = draw(st.sampled_from(BAD_DTYPES))
            elif what == "offset_dtype":
                dtype["offsets"][i] = draw(st.sampled_from([torch.int32] + BAD_DTYPES))
            elif what == "shape":
                key = draw(st.sampled_from(["rows", "offsets"]))
                shape[key][i] = draw(st.sampled_from(["2d", "0d"]))
            elif what == "sparse":
                layout[draw(st.sampled_from(["rows", "offsets"]))][i] = "sparse"
            elif what == "handle":
                tables[i] = draw(st.sampled_from(["unknown", "negative", "huge"]))
            elif what == "bags":
                offsets[i] = offsets[i] + [len(rows[i])]
            elif what == "swap" and len(offsets[i]) > 2:
                offsets[i][1], offsets[i][2] = offsets[i][2], offsets[i][1]
            elif what == "tables":
                tables.append(0)  # a handle without rows and offsets
    tensors = {
        key: [build(v, dtype[key][i], shape[key][i], layout[key][i]) for i, v in enumerate(values)]
        for key, values in (("rows", rows), ("offsets", offsets))
    }
    return tables, rows, offsets, tensors, valid(tables, rows, offsets, tensors)


def valid(tables, rows, offsets, tensors):
    """The lookup's rules, written from its documentation: known handles, one rows and one offsets
    tensor per handle, dense 1-D tensors, int64 or int32 rows each in [0, num_embeddings), int64
    offsets, as many bags for every table, offsets that start at 0, never decrease and end within
    the rows. Read from the tensors sent (an extreme cast to int32 wraps, to 0 for 2**40)."""
    if len(tables) != len(rows) or any(not isinstance(t, int) for t in tables):
        return False
    counts = set()
    for rt, ot in zip(tensors["rows"], tensors["offsets"]):
        if rt.layout != torch.strided or ot.layout != torch.strided or rt.dim() != 1 or ot.dim() != 1:
            return False
        if rt.dtype not in ROW_DTYPES or ot.dtype != torch.int64:
            return False
        r, o = rt.tolist(), ot.tolist()
        if any(not 0 <= x < NUM_EMBEDDINGS for x in r):
            return False
        if o and (o[0] != 0 or any(b < a for a, b in zip(o, o[1:])) or o[-1] > len(r)):
            return False
        counts.add(len(o))
    return len(counts) == 1


def handles_of(tables, handles):
    bad = {"unknown": 424242, "negative": -1, "huge": 2**62}
    return [handles[t] if isinstance(t, int) else bad[t] for t in tables]


@pytest.mark.timeout(180)
@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests())
def test_a_lookup_answers_as_torch_or_is_refused_and_the_owner_survives(cluster, shared, request):
    handles, twins = shared
    tables, rows, offsets, tensors, ok = request
    sent_handles = handles_of(tables, handles)
    event("valid" if ok else "invalid")
    expected = None
    if ok:
        expected = torch.cat([twins[t](r, o) for t, r, o in zip(tables, tensors["rows"], tensors["offsets"])], dim=1)

    # the owner's op, as any worker could call it (no caller-side checks)
    raw = _rpc_functions.call("worker1", "_lookup_bags", (-1, sent_handles, tensors["rows"], tensors["offsets"]))
    try:
        answer, message_id = raw.wait()
        assert ok, f"the owner answered an invalid request: {request}"
        assert message_id == -1
        torch.testing.assert_close(answer, expected)
    except RuntimeError as error:
        assert not ok, f"the owner refused a valid request {request}: {error}"
        assert "lookup_bags: " in str(error), f"not refused by the lookup's checks: {error}"

    # the public call: refused before sending, or by the owner (naming it), or answered
    if len(tables) == len(rows):
        try:
            answer = plugin.embedding.lookup_bags_async(
                "worker1", None, sent_handles, tensors["rows"], tensors["offsets"]).wait()
            assert ok, f"lookup_bags_async answered an invalid request: {request}"
            torch.testing.assert_close(answer, expected)
        except (RuntimeError, ValueError, TypeError) as error:
            assert not ok, f"lookup_bags_async refused a valid request {request}: {error}"
            assert str(error).startswith(("lookup_bags_async to 'worker1': ",
                                          "lookup_bags_async: the lookup of handles")), error
            if str(error).startswith("lookup_bags_async: the lookup"):
                assert "failed on owner 'worker1': " in str(error) and "lookup_bags: " in str(error), error

    # the owner still serves
    rows0 = plugin.embedding.lookup_bags_async("worker1", None, handles[:1], [torch.tensor([1, 2])],
                                               [torch.tensor([0, 1])]).wait()
    torch.testing.assert_close(rows0, twins[0](torch.tensor([1, 2]), torch.tensor([0, 1])))
