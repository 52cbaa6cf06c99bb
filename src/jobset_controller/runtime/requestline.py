"""The request-line check of the HTTP/1.1 server (runtime/http1server.py): METHOD SP TARGET SP
VERSION, with exactly one space between the three, as Go's net/http requires.

Why a check of our own: llhttp (``httptools``) skips any run of spaces between the method, the
target and the version, so ``GET  /healthz HTTP/1.1`` reached the handler of ``/healthz``, where
Go's server (``parseRequestLine``: the line cut at its first two spaces, the rest a version)
answers 400. llhttp tells us neither the raw line nor where a request starts in what was read,
so `RequestLines` follows the byte stream itself, after the parser has been fed the same bytes:
a request line up to its line end, the head up to its empty line, then as many body bytes as
the parser found in the request's Content-Length (`body_length`, called from the parser's
``on_headers_complete``). The server refuses every request with a Transfer-Encoding, so a
Content-Length (or none: no body) frames every request it serves, and this framing is complete
for them: every request line of a connection is checked, the first of several pipelined in one
read as much as the last, and one split over several reads as a whole.

What it covers: the line's bytes between the first byte of the method and the CR of its CRLF
must split on single spaces into exactly three non-empty parts; the parser has already checked
the method's characters, the target's and the version's form, and that the line ends in CRLF.
CR and LF before a request line are skipped, as llhttp skips them (RFC 9112, 2.2: a server
SHOULD ignore at least one empty line before a request line; Go skips them only after a POST).
A line longer than the server's head limit is not followed: the parser refuses it (431).
"""

from __future__ import annotations

from collections import deque
from typing import Final

_LINE, _HEAD, _BODY, _DONE = range(4)
_HEAD_END: Final = b"\r\n\r\n"


class RequestLines:
    """Follows one connection's request stream and says which request's line is malformed.

    `scan` is given, in order, every chunk of bytes the parser was fed; `body_length` is told,
    in order, each request's body length as the parser found it. `scan` returns the ordinal
    (0 for a connection's first request) of the first request whose line is malformed, once
    that line is whole; None otherwise. After a head whose body length it was not told (the
    parser stopped there: a refusal, an upgrade, a request that closes the connection) it
    follows nothing more.
    """

    __slots__ = ("_body_left", "_lengths", "_limit", "_line", "_ordinal", "_state", "_tail")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._state = _LINE
        self._line = bytearray()
        self._tail = b""  # the head's last bytes read, to find its end across reads
        self._body_left = 0
        self._lengths: deque[int] = deque()
        self._ordinal = 0

    def body_length(self, length: int) -> None:
        self._lengths.append(length)

    def scan(self, data: memoryview | bytes) -> int | None:
        at, end = 0, len(data)
        while at < end:
            state = self._state
            if state == _BODY:
                step = min(self._body_left, end - at)
                self._body_left -= step
                at += step
                if not self._body_left:
                    self._state = _LINE
                    self._ordinal += 1
            elif state == _LINE:
                if not self._line:
                    while at < end and data[at] in b"\r\n":  # empty lines before a request
                        at += 1
                    if at == end:
                        break
                newline = bytes(data[at : at + self._limit + 2]).find(b"\n")
                if newline < 0:
                    self._line += data[at:end]
                    at = end
                    if len(self._line) > self._limit:
                        self._state = _DONE  # the parser refuses it (431)
                    continue
                self._line += data[at : at + newline + 1]
                at += newline + 1
                line = bytes(self._line)
                self._line.clear()
                if not _well_formed(line):
                    self._state = _DONE
                    return self._ordinal
                self._state, self._tail = _HEAD, b"\r\n"
            elif state == _HEAD:
                window = self._tail + bytes(data[at:end])
                found = window.find(_HEAD_END)
                if found < 0:
                    self._tail = window[-3:]
                    at = end
                    continue
                at += found + len(_HEAD_END) - len(self._tail)
                self._tail = b""
                if not self._lengths:
                    self._state = _DONE  # the parser stopped in this head
                    continue
                self._body_left = self._lengths.popleft()
                self._state = _BODY
                if not self._body_left:
                    self._state = _LINE
                    self._ordinal += 1
            else:
                break
        return None


def _well_formed(line: bytes) -> bool:
    """METHOD SP TARGET SP VERSION CRLF: three parts, none empty, one space between each."""
    parts = line.removesuffix(b"\n").removesuffix(b"\r").split(b" ")
    return len(parts) == 3 and all(parts)
