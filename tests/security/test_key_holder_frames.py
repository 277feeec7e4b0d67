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
two-worker training job of tests/support/security_job.py; the attacker is tests/security/
jobs.py's KeyedPeer, from an address of its own per attack, so that the worker's one log line
per address tells which check refused it.
"""
import time

import pytest

from tests.security.jobs import Job, KEY, listening_sockets
from tests.security.test_encryption import UNREQUESTED_HELLO

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
# A RequestedConnection hello cut inside its uint64 (tests/security/test_encryption.py's
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
    from tests.security.jobs import KeyedPeer

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
    from tests.security.jobs import KeyedPeer

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
