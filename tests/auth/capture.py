"""A packet capture on the loopback interface, as an observer on the path between two
workers of one machine sees their traffic: a raw ``AF_PACKET`` socket bound to ``lo``
(needs root or CAP_NET_RAW; no capture tool).

    with LoopbackCapture(marker) as capture:
        ...                        # the job runs
    capture.marker_packets         # packets that held the marker
    capture.payload_bytes(ports)   # TCP payload bytes from or to these ports

Each packet is read once (the copy that the loopback interface receives; the copy it sends
is skipped). Only counts are kept, no packet.
"""
import socket
import struct
import threading
from collections import Counter

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # sockaddr_ll's pkttype of a packet this host sends
SOL_PACKET = 263
PACKET_STATISTICS = 6
ETHERNET_HEADER = 14


def open_raw_socket():
    """The raw socket on ``lo``; raises PermissionError (no CAP_NET_RAW) or OSError."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        try:  # root may exceed net.core.rmem_max: room for the bursts of a job's tensors
            sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        sock.bind(("lo", 0))
        sock.settimeout(0.2)
    except BaseException:
        sock.close()
        raise
    return sock


def tcp_segment(frame: bytes):
    """(source port, destination port, payload length) of an Ethernet frame holding a TCP
    segment over IPv4 or IPv6 (without IPv6 extension headers), else None."""
    if len(frame) < ETHERNET_HEADER + 40:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    ip = ETHERNET_HEADER
    if ethertype == 0x0800:
        ihl = (frame[ip] & 0x0F) * 4
        if frame[ip + 9] != 6:
            return None
        total = struct.unpack_from("!H", frame, ip + 2)[0]
        tcp, end = ip + ihl, ip + total
    elif ethertype == 0x86DD:
        if frame[ip + 6] != 6:
            return None
        tcp, end = ip + 40, ip + 40 + struct.unpack_from("!H", frame, ip + 4)[0]
    else:
        return None
    if len(frame) < tcp + 20:
        return None
    source, destination = struct.unpack_from("!HH", frame, tcp)
    offset = (frame[tcp + 12] >> 4) * 4
    return source, destination, max(0, min(end, len(frame)) - tcp - offset)


class LoopbackCapture:
    """Captures ``lo`` on a thread of its own while the ``with`` block runs, looking for
    ``marker`` in every packet and counting TCP payload bytes per port."""

    def __init__(self, marker: bytes):
        self.marker = marker
        self.marker_packets = 0
        self.packets = 0
        self.drops = 0
        self._bytes = Counter()  # port -> TCP payload bytes from or to it
        self._stop = threading.Event()
        self._sock = open_raw_socket()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            # tp_packets, tp_drops: packets the kernel could not queue for us
            self.drops = struct.unpack("II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
        finally:
            self._sock.close()

    def _run(self):
        buffer = bytearray(1 << 17)
        view = memoryview(buffer)
        while not self._stop.is_set():
            try:
                n, address = self._sock.recvfrom_into(buffer)
            except socket.timeout:
                continue
            except OSError:
                return
            if address[2] == PACKET_OUTGOING:
                continue
            frame = bytes(view[:n])
            self.packets += 1
            if self.marker in frame:
                self.marker_packets += 1
            segment = tcp_segment(frame)
            if segment is not None and segment[2] > 0:
                self._bytes[segment[0]] += segment[2]
                self._bytes[segment[1]] += segment[2]

    def payload_bytes(self, ports) -> int:
        """TCP payload bytes captured from or to any of ``ports`` (a segment between two of
        them counts twice)."""
        return sum(self._bytes[port] for port in ports)
