"""What a rank's TCP connections hold unsent: the parse of /proc/net/tcp (this VM's format), and
a real connection on loopback whose peer does not read, so the sender's queue fills, against one
whose peer keeps up."""

from __future__ import annotations

import os
import socket
import time

from traintop.collectors.job_sockets import SocketQueues, queued, socket_inodes

TABLE = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 33 1 0000000051811d8e 100 0 0 10 0
   1: 0100007F:7A1D 0100007F:A2B4 01 00040000:00000000 01:00000014 00000000     0        0 4711 2 0000000051811d8e 20 4 30 10 -1
   2: 0100007F:A2B4 0100007F:7A1D 01 00000000:00010000 00:00000000 00000000     0        0 4712 1 0000000051811d8e 20 4 30 10 -1
   3: 0100007F:9000 0100007F:9001 01 00001000:00000000 01:00000014 00000000     0        0 999 1 0000000051811d8e 20 4 30 10 -1
"""  # noqa: E501


def test_queued_sums_the_established_connections_of_the_rank() -> None:
    assert queued(TABLE, {4711, 4712}) == 0x40000  # 256 KiB unsent on 4711; 4712 receives
    assert queued(TABLE, {33}) == 0  # a listening socket holds nothing to send
    assert queued(TABLE, {999, 4711}) == 0x41000
    assert queued(TABLE, set()) == 0


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    return server, client, peer


def test_a_connection_whose_peer_does_not_read_holds_its_bytes() -> None:
    server, client, peer = _pair()
    try:
        assert socket_inodes(os.getpid()) >= {os.fstat(client.fileno()).st_ino}
        reader = SocketQueues()
        assert reader.read(os.getpid()) == 0
        client.setblocking(False)
        sent = 0
        try:
            while sent < 64 << 20:
                sent += client.send(b"x" * 65536)
        except BlockingIOError:
            pass  # the peer's window and our buffer are full: the rest waits here
        time.sleep(0.6)  # a namespace's tables are read again after half a second
        assert (reader.read(os.getpid()) or 0) > 16 * 1024
    finally:
        for s in (client, peer, server):
            s.close()
