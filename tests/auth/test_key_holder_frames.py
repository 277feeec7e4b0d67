"""Issue 44, item 10: a peer that holds the key (it passes the handshake, so its frames pass
their tags) and then sends a TensorPipe object cut short (an empty frame, or a frame that
ends inside the object) gets its connection closed and logged; the worker does not crash.

TensorPipe decodes its objects with libnop through a reader that checks no bounds before a
read (tensorpipe/common/nop.h, NopReader): an object shorter than its encoding says makes it
read through a null pointer (the worker dies of SIGSEGV). The transport now checks that a
frame holds exactly one whole libnop value before TensorPipe's decoder sees it
(tensorpipe_abi.h, nopValueSize). Both places where TensorPipe reads an object from a new
connection are attacked: the listener's hello (the connection's first frame) and, after a
valid hello that asks for a pipe, the pipe's first object (its brochure). The job is the real
two-worker training job of tests/support/security_job.py; the attacker is tests/auth/
jobs.py's KeyedPeer, from an address of its own per attack, so that the worker's one log line
per address tells which check refused it.
"""
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.auth.jobs import Job, KEY, listening_sockets
from tests.auth.test_encryption import UNREQUESTED_HELLO

pytestmark = pytest.mark.timeout(300)



# libnop's encoding (include/nop/base/: prefix bytes, counts as fixints below 128), enough of it
# to write TensorPipe's first objects (tensorpipe/core/nop_types.h).
def _count(n):
    assert n < 128
    return bytes([n])


def _string(text):
    return b"\xbd" + _count(len(text)) + text.encode()


def _structure(*members):
    return b"\xb9" + _count(len(members)) + b"".join(members)


def _map(pairs):
    return b"\xbb" + _count(len(pairs)) + b"".join(key + value for key, value in pairs)


def _variant(index, value):
    return b"\xb8" + _count(index) + value


# A TensorPipe Packet with index 0, SpontaneousConnection{contextName}: TensorPipe's listener
# accepts it as a pipe opened by a peer, and the pipe then reads the peer's brochure from the
# connection.
SPONTANEOUS_HELLO = _variant(0, _structure(_string("attacker")))
assert SPONTANEOUS_HELLO == b"\xb8\x00\xb9\x01\xbd\x08attacker"
# A Brochure{transportDomainDescriptors, channelDeviceDescriptors} as a worker with a key sends it.
BROCHURE = _structure(
    _map([(_string("gilfree_auth"), _string("gilfree_auth:v2"))]),
    _map([(_string("basic"), _map([(_structure(_string("cpu"), b"\x00"), _string("any"))]))]),
)
# A RequestedConnection hello cut inside its uint64 (tests/auth/test_encryption.py's
# UNREQUESTED_HELLO without 7 of its last 8 bytes).
CUT_HELLO = b"\xb8\x01\xb9\x01\x83\x07"
# The start of a Brochure: STRUCTURE, 2 members, a MAP whose count is missing.
CUT_BROCHURE = b"\xb9\x02\xbb"

# name: (the frames' payloads, numbered from 0, after the handshake)
ATTACKS = {
    "empty_hello": [b""],
    "cut_hello": [CUT_HELLO],
    "empty_brochure": [SPONTANEOUS_HELLO, b""],
    "cut_brochure": [SPONTANEOUS_HELLO, CUT_BROCHURE],
}


def _assert_alive(job, what):
    """Fails when a worker of `job` ends within a second (a crash shows as a negative exit
    code: -11 for SIGSEGV)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        codes = [p.poll() for p in job.procs]
        assert codes == [None, None], (what, codes, job.logs())
        time.sleep(0.05)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_key_holders_object_cut_short_closes_its_connection_not_the_worker(tmp_path, attack):
    pytest.importorskip("cryptography", reason="the keyed client needs AES-GCM from the 'cryptography' package")
    from tests.auth.jobs import KeyedPeer

    job = Job(tmp_path, keys=(KEY, KEY), steps=30, pause=0.1)
    try:
        job.wait_ready()
        for rank, proc in enumerate(job.procs):
            ports = [port for _, port in listening_sockets([proc.pid]) if port != job.port]
            assert len(ports) == 1, ports  # the worker's transport listener
            peer = KeyedPeer(ports[0], source=f"127.0.{rank + 1}.2")
            for number, payload in enumerate(ATTACKS[attack]):
                peer.sock.sendall(peer.frame(payload, number))
            assert peer.closed_by_worker(), (attack, job.logs())
            peer.close()
            _assert_alive(job, attack)
            # TensorPipe's listener still reads hellos (one that failed there would end it, and
            # this connection would wait for it forever): it drops a pipe's connection that no
            # pipe asked for.
            control = KeyedPeer(ports[0], source=f"127.0.{rank + 1}.3")
            control.sock.sendall(control.frame(UNREQUESTED_HELLO, 0))
            assert control.closed_by_worker(), (attack, job.logs())
            control.close()
        codes = job.wait()
    finally:
        job.kill()
    assert codes == [0, 0], (attack, codes, job.logs())  # -11: a worker died of SIGSEGV
    assert "DONE steps=30" in job.log(0), job.logs()
    for rank in (0, 1):
        lines = [line for line in job.log(rank).splitlines()
                 if f"[gilfree-rpc] dropped a connection from 127.0.{rank + 1}.2:" in line]
        assert len(lines) == 1, (attack, job.logs())
        assert "does not hold one whole TensorPipe object" in lines[0], (attack, lines[0])
        assert f"127.0.{rank + 1}.3" not in job.log(rank), job.logs()


def test_every_cut_of_a_hello_and_of_a_brochure_closes_its_connection_only(tmp_path):
    """Each proper prefix of a valid hello, as a connection's first frame, and of a valid
    brochure, after a valid hello: each closes its connection (TensorPipe's decoder never sees
    it), the worker lives, and the job ends as usual."""
    pytest.importorskip("cryptography", reason="the keyed client needs AES-GCM from the 'cryptography' package")
    from tests.auth.jobs import KeyedPeer

    cuts = [[SPONTANEOUS_HELLO[:n]] for n in range(len(SPONTANEOUS_HELLO))]
    cuts += [[SPONTANEOUS_HELLO, BROCHURE[:n]] for n in range(len(BROCHURE))]
    job = Job(tmp_path, keys=(KEY, KEY), steps=300, pause=0.1)  # outlives the attacks on a busy machine
    try:
        job.wait_ready()
        proc = job.procs[1]  # the parameter's owner
        ports = [port for _, port in listening_sockets([proc.pid]) if port != job.port]
        assert len(ports) == 1, ports
        for i, frames in enumerate(cuts):
            peer = KeyedPeer(ports[0], source=f"127.0.9.{i + 1}")
            for number, payload in enumerate(frames):
                peer.sock.sendall(peer.frame(payload, number))
            assert peer.closed_by_worker(), (frames, job.logs())
            peer.close()
            assert proc.poll() is None, (frames, proc.poll(), job.logs())  # -11: SIGSEGV
        codes = job.wait()
    finally:
        job.kill()
    assert codes == [0, 0], job.logs()
    assert "DONE steps=300" in job.log(0), job.logs()
    lines = [line for line in job.log(1).splitlines() if "[gilfree-rpc] dropped a connection from 127.0.9." in line]
    assert len(lines) == len(cuts), job.log(1)  # one per connection (each from an address of its own)
    assert all("does not hold one whole TensorPipe object" in line for line in lines), lines


# --- fuzz --------------------------------------------------------------------------------------

_WIDTHS = [1, 2, 4, 8, 1, 2, 4, 8, 4, 8]  # payload bytes after U8 U16 U32 U64 I8 I16 I32 I64 F32 F64

_leaves = st.one_of(
    st.integers(0x00, 0x7F).map(lambda v: bytes([v])),  # positive fixint (and bool)
    st.integers(0xC0, 0xFF).map(lambda v: bytes([v])),  # negative fixint
    st.just(b"\xbe"),  # nil
    st.tuples(st.integers(0, 9), st.binary(min_size=8, max_size=8)).map(
        lambda t: bytes([0x80 + t[0]]) + t[1][:_WIDTHS[t[0]]]),  # U8 .. F64
    st.binary(max_size=20).map(lambda b: b"\xbd" + _count(len(b)) + b),  # string
    st.binary(max_size=20).map(lambda b: b"\xbc" + _count(len(b)) + b),  # binary
    st.integers(0xB5, 0xB7).map(lambda v: bytes([v])),  # table, error, handle: never TensorPipe's
)
# Whole libnop values of any shape (TensorPipe's objects are some of them).
_values = st.recursive(_leaves, lambda children: st.one_of(
    st.lists(children, max_size=4).map(lambda xs: b"\xb9" + _count(len(xs)) + b"".join(xs)),  # structure
    st.lists(children, max_size=4).map(lambda xs: b"\xba" + _count(len(xs)) + b"".join(xs)),  # array
    st.lists(st.tuples(children, children), max_size=3).map(_map),
    st.tuples(st.integers(0, 2), children).map(lambda t: _variant(*t)),
), max_leaves=12)


@st.composite
def _frames(draw):
    """A frame's payload: a whole value, one cut short, one with a byte changed or bytes after
    it, or random bytes."""
    value = draw(st.one_of(_values, st.sampled_from([SPONTANEOUS_HELLO, BROCHURE])))
    how = draw(st.sampled_from(["whole", "cut", "changed", "longer", "random"]))
    if how == "cut" and value:
        return value[:draw(st.integers(0, len(value) - 1))]
    if how == "changed" and value:
        at = draw(st.integers(0, len(value) - 1))
        return value[:at] + bytes([draw(st.integers(0, 255))]) + value[at + 1:]
    if how == "longer":
        return value + draw(st.binary(min_size=1, max_size=8))
    if how == "random":
        return draw(st.binary(max_size=64))
    return value


def _value_end(data, at=0):
    """Where the libnop value that starts at `data[at]` ends (libnop's wire format, written
    again here from its headers, not from the transport's nopValueSize); None when the bytes
    end inside it or it uses a prefix TensorPipe's objects never use."""
    if at >= len(data):
        return None
    prefix = data[at]
    at += 1
    if prefix < 0x80 or prefix >= 0xC0 or prefix == 0xBE:
        return at
    if prefix <= 0x89:
        at += _WIDTHS[prefix - 0x80]
        return at if at <= len(data) else None
    if prefix == 0xB8:  # variant: index, value
        at = _value_end(data, at)
        return None if at is None else _value_end(data, at)
    if prefix not in (0xB9, 0xBA, 0xBB, 0xBC, 0xBD) or at >= len(data) or data[at] > 0x83:
        return None
    if data[at] < 0x80:
        count, at = data[at], at + 1
    else:
        width = 1 << (data[at] - 0x80)
        if at + 1 + width > len(data):
            return None
        count, at = int.from_bytes(data[at + 1:at + 1 + width], "little"), at + 1 + width
    if prefix in (0xBC, 0xBD):  # binary, string
        return at + count if at + count <= len(data) else None
    for _ in range(count * (2 if prefix == 0xBB else 1)):
        at = _value_end(data, at)
        if at is None:
            return None
    return at


def _one_whole_value(data):
    return _value_end(data) == len(data)


def _brochure_shaped(data):
    """A whole structure of two maps: the shape of TensorPipe's Brochure (which its decoder
    would then accept, and its pipe act on)."""
    if not _one_whole_value(data) or data[:3] != b"\xb9\x02\xbb":
        return False
    first_end = _value_end(data, 2)
    return first_end is not None and data[first_end:first_end + 1] == b"\xbb"


@pytest.mark.timeout(600)
def test_a_key_holders_fuzzed_objects_never_end_the_worker(tmp_path):
    """Bounded fuzz (Hypothesis, 120 examples): any libnop value, whole, cut short, changed,
    with bytes after it, or random bytes, sent by a key holder as a connection's first frame
    (TensorPipe's hello) or after a valid hello (the pipe's brochure): the worker lives, and the
    job ends as usual; each frame that is not one whole value closes its connection with the
    transport's log line. (A frame that TensorPipe accepts leaves its connection open; the test
    closes it.) Whole brochure-shaped objects are left out: TensorPipe acts on what they say,
    and one that offers no transport in common ends the worker (the known limit below)."""
    pytest.importorskip("cryptography", reason="the keyed client needs AES-GCM from the 'cryptography' package")
    from tests.auth.jobs import KeyedPeer

    job = Job(tmp_path, keys=(KEY, KEY), steps=400, pause=0.1)  # outlives the fuzz on a busy machine
    sent = []
    try:
        job.wait_ready()
        proc = job.procs[1]
        ports = [port for _, port in listening_sockets([proc.pid]) if port != job.port]
        assert len(ports) == 1, ports

        @settings(max_examples=120, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(payload=_frames(), after_hello=st.booleans())
        def one(payload, after_hello):
            assume(not (after_hello and _brochure_shaped(payload)))
            frames = [SPONTANEOUS_HELLO, payload] if after_hello else [payload]
            source = f"127.0.8.{len(sent) + 1}"
            sent.append((source, payload))
            peer = KeyedPeer(ports[0], source=source)
            try:
                for number, frame in enumerate(frames):
                    peer.sock.sendall(peer.frame(frame, number))
                closed = peer.closed_by_worker(timeout=0.5 if _one_whole_value(payload) else 15.0)
            finally:
                peer.close()
            assert proc.poll() is None, (frames, proc.poll(), job.logs())  # -11: SIGSEGV
            assert closed or _one_whole_value(payload), (frames, job.logs())

        one()
        codes = job.wait()
    finally:
        job.kill()
    assert codes == [0, 0], job.logs()
    assert "DONE steps=400" in job.log(0), job.logs()
    assert 100 <= len(sent) <= 250, len(sent)
    log = job.log(1)
    for source, payload in sent:
        if not _one_whole_value(payload):  # the transport's verdict agrees with libnop's format
            assert f"dropped a connection from {source}:" in log, (source, payload, log)
            line = next(line for line in log.splitlines() if f"dropped a connection from {source}:" in line)
            assert "does not hold one whole TensorPipe object" in line, (payload, line)


@pytest.mark.xfail(strict=True, reason="known limit: TensorPipe's pipe aborts the process (TP_THROW_ASSERT "
                   "'Could not find a viable transport', std::terminate) on a whole, well-formed brochure "
                   "that offers no transport in common; the transport does not check what TensorPipe's "
                   "objects say, only that they are whole (docs/security.md)")
def test_a_key_holders_brochure_with_no_transport_in_common_ends_the_worker(tmp_path):
    """Found by the fuzz above: a key holder's brochure whose transport descriptor differs from
    the worker's (one byte changed) ends the worker with SIGABRT. Fails (xfail) while that is so."""
    pytest.importorskip("cryptography", reason="the keyed client needs AES-GCM from the 'cryptography' package")
    from tests.auth.jobs import KeyedPeer

    other_transport = BROCHURE.replace(b"gilfree_auth:v2", b"gilfree_auth:v9")
    assert _brochure_shaped(other_transport)
    job = Job(tmp_path, keys=(KEY, KEY), steps=30, pause=0.1)
    try:
        job.wait_ready()
        proc = job.procs[1]
        ports = [port for _, port in listening_sockets([proc.pid]) if port != job.port]
        peer = KeyedPeer(ports[0], source="127.0.7.1")
        peer.sock.sendall(peer.frame(SPONTANEOUS_HELLO, 0) + peer.frame(other_transport, 1))
        peer.closed_by_worker()
        peer.close()
        _assert_alive(job, "a brochure with no transport in common")
    finally:
        job.kill()
