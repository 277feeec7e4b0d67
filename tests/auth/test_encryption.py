"""Issue 30: with a key, an observer on the path reads nothing of the job's messages, and
frames altered, reordered, replayed or cut on the path close their connection, never the
worker.

The observer is a raw packet capture on the loopback interface (tests/auth/capture.py)
while the two workers of tests/support/security_job.py exchange a tensor that repeats a
random marker; the same capture of torch's own RPC with TensorPipe's basic channel (the
tensor's bytes through the TCP connection, as with a key) finds the marker, which shows
that the capture sees the job's traffic. The on-path attacker is a client that holds the
key (it plays the handshake by the protocol, tests/auth/jobs.py's KeyedPeer) and then
sends frames of its choosing, each connection from an address of its own, so that the
worker's one log line per address tells which check refused it.
"""
import os
import socket
import struct

import pytest

from tests.auth.capture import LoopbackCapture
from tests.auth.jobs import KEY, Job, listening_sockets, skip_without_ipv6_loopback

pytestmark = pytest.mark.timeout(300)

TENSOR_BYTES = 64 << 10  # security_job.py --marker
ROUNDS = 8


def _capture_or_skip(marker):
    try:
        return LoopbackCapture(marker)
    except PermissionError as e:
        pytest.skip(f"cannot open a raw packet socket on 'lo' ({e}): the capture needs root or CAP_NET_RAW")


@pytest.mark.parametrize(
    "stack, master_addr",
    [("torch_basic_channel", "127.0.0.1"), ("key", "127.0.0.1"), ("key", "::1")],
    ids=["torch_basic_channel", "key", "key_ipv6"],
)
def test_capture_on_loopback_finds_the_marker_only_without_a_key(tmp_path, stack, master_addr):
    skip_without_ipv6_loopback(master_addr)
    marker = os.urandom(16)
    capture = _capture_or_skip(marker)
    keyed = stack == "key"
    extra = ["--marker", marker.hex(), "--rounds", str(ROUNDS)] + ([] if keyed else ["--torch-rpc"])
    job = Job(tmp_path, keys=(KEY, KEY) if keyed else (None, None), master_addr=master_addr, extra=extra)
    try:
        with capture:
            job.wait_ready()
            pids = [p.pid for p in job.procs]
            ports = {port for _, port in listening_sockets(pids)}
            (tmp_path / "go").touch()
            codes = job.wait(timeout=120)
    finally:
        job.kill()
    assert codes == [0, 0], job.logs()
    assert f"SENT {ROUNDS}" in job.log(0), job.logs()
    # Every connection of the job has one end at a listening port: the capture saw at least
    # the tensors' bytes, both ways, on them.
    seen = capture.payload_bytes(ports)
    assert seen >= 2 * ROUNDS * TENSOR_BYTES, (seen, ports, capture.packets, capture.drops)
    if keyed:
        assert capture.marker_packets == 0, (capture.marker_packets, capture.drops)
    else:
        assert capture.marker_packets > 0, (seen, capture.packets, capture.drops)


# Around the transport's 256 KiB encryption parts and AES's 16-byte blocks; the largest
# fills the socket's buffer, so a frame is begun on the caller's thread and finished on the
# connection's writer thread.
SIZES = [0, 1, 15, 16, 17, 4095, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (3 << 20) + 5, (64 << 20) + 3]


def test_tensors_of_every_size_arrive_intact_with_a_key(tmp_path):
    job = Job(tmp_path, keys=(KEY, KEY), extra=["--sizes", ",".join(map(str, SIZES))])
    try:
        codes = job.wait(timeout=180)
    finally:
        job.kill()
    assert codes == [0, 0], job.logs()
    assert "SIZES OK" in job.log(0), job.logs()
    assert "[gilfree-rpc]" not in job.log(0) + job.log(1), job.logs()


def _flip(data: bytes, at: int) -> bytes:
    altered = bytearray(data)
    altered[at] ^= 0x01
    return bytes(altered)


HEADER = 8 + 16  # a frame's sealed length and its tag
# name: (the bytes sent after the handshake, given the connection and a frame of another
# connection; what the worker logs for the connection's address: None for nothing)
ATTACKS = {
    "altered_length": (lambda peer, other: _flip(peer.frame(b"", 0), 0), "a frame header failed its authentication tag"),
    "altered_header_tag": (lambda peer, other: _flip(peer.frame(b"", 0), 12), "a frame header failed its authentication tag"),
    "altered_payload": (lambda peer, other: _flip(peer.frame(bytes(64), 0), HEADER + 10), "a frame failed its authentication tag"),
    "altered_payload_tag": (lambda peer, other: _flip(peer.frame(bytes(64), 0), HEADER + 64 + 15), "a frame failed its authentication tag"),
    "reordered": (lambda peer, other: peer.frame(b"", 1), "a frame header failed its authentication tag"),
    "replayed_from_another_connection": (lambda peer, other: other, "a frame header failed its authentication tag"),
    "truncated": (lambda peer, other: peer.frame(bytes(4096), 0)[:HEADER + 1000], None),
}


# TensorPipe's hello of a connection that a pipe asked for (nop encoding of its Packet variant:
# index 1, RequestedConnection{registrationId}), with an id no pipe registered: TensorPipe's
# listener drops the connection, and goes on listening.
UNREQUESTED_HELLO = b"\xb8\x01\xb9\x01\x83" + struct.pack("<Q", (1 << 40) + 7)


def test_frames_altered_reordered_replayed_or_cut_close_their_connection_only(tmp_path):
    """An attacker on the path who alters, reorders, replays or cuts the frames of a
    connection (played by a client with the key, each attack on a connection of its own,
    from an address of its own) makes the worker close that connection, logging which check
    failed; the worker still accepts connections afterwards (TensorPipe's listener never
    saw the frame: one failed connection would end it), the workers keep running and the
    job ends as usual. Last, a frame made by the protocol passes the transport's checks (no
    log line; TensorPipe drops the connection it asks for nothing), which shows that the
    attacks fail for what they alter."""
    pytest.importorskip("cryptography", reason="the keyed client needs AES-GCM from the 'cryptography' package")
    from tests.auth.jobs import KeyedPeer

    job = Job(tmp_path, keys=(KEY, KEY), steps=40, pause=0.1)
    try:
        job.wait_ready()
        for rank, proc in enumerate(job.procs):
            ports = [port for _, port in listening_sockets([proc.pid]) if port != job.port]
            assert len(ports) == 1, ports  # the worker's transport listener
            other = KeyedPeer(ports[0], source=f"127.0.{rank + 1}.1")
            frame_of_other = other.frame(b"", 0)
            other.close()
            for i, (name, (make, _)) in enumerate(ATTACKS.items()):
                peer = KeyedPeer(ports[0], source=f"127.0.{rank + 1}.{i + 2}")
                peer.sock.sendall(make(peer, frame_of_other))
                if name == "truncated":
                    peer.sock.shutdown(socket.SHUT_WR)
                assert peer.closed_by_worker(), (name, job.logs())
                peer.close()
            assert all(p.poll() is None for p in job.procs), job.logs()
            control = KeyedPeer(ports[0], source=f"127.0.{rank + 1}.100")
            control.sock.sendall(control.frame(UNREQUESTED_HELLO, 0))
            assert control.closed_by_worker(), job.logs()
            control.close()
            KeyedPeer(ports[0], source=f"127.0.{rank + 1}.101").close()  # still listening
        assert job.wait() == [0, 0], job.logs()
    finally:
        job.kill()
    assert "DONE steps=40" in job.log(0), job.logs()
    for rank in (0, 1):
        lines = {line.split("dropped a connection from ")[1].split(":")[0]: line
                 for line in job.log(rank).splitlines() if "[gilfree-rpc] dropped a connection from " in line}
        for i, (name, (_, expected)) in enumerate(ATTACKS.items()):
            line = lines.get(f"127.0.{rank + 1}.{i + 2}")
            if expected is None:
                assert line is None, (name, line)
            else:
                assert line is not None and expected in line, (name, line, job.logs())
        assert f"127.0.{rank + 1}.100" not in lines, job.logs()  # the frame made by the protocol passed
