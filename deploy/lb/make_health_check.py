#!/usr/bin/env python3
"""Writes the grpc.health.v1 check of haproxy.cfg as HAProxy tcp-check lines.

HAProxy 2.6 has no gRPC health check, and its HTTP check cannot send a gRPC
body (a length-prefixed message always holds NUL bytes). So the check speaks
HTTP/2 itself: `tcp-check send-binary` sends, in one write, everything a
client sends for one unary call over cleartext HTTP/2 ("prior knowledge"):

  1. the connection preface "PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n";
  2. an empty SETTINGS frame (every setting at its default);
  3. HEADERS on stream 1 (END_HEADERS): POST /grpc.health.v1.Health/Check,
     content-type application/grpc, te trailers. HPACK without Huffman
     coding and without dynamic table entries: static-table indices and
     "literal without indexing" fields, so the block is the same bytes on
     every connection;
  4. DATA on stream 1 (END_STREAM): the gRPC message, a 5-byte prefix
     (0 = uncompressed, 4-byte big-endian length) and the protobuf
     HealthCheckRequest {service = 1: string}.

The server answers with its own SETTINGS, the response HEADERS, one DATA
frame holding the HealthCheckResponse {status = 1: enum} and the trailers.
The serialised answer is 5 bytes of prefix and 2 of message:

  SERVING      00 00000002 08 01
  NOT_SERVING  00 00000002 08 02
  (SERVICE_UNKNOWN 03 is for Watch; an unknown service on Check is the
  trailer grpc-status 5 with no message, which the check sees as a timeout)

The check first waits for any status (`expect rbinary`, matched on the hex
form of what was received, so NUL bytes do not stop it), then requires
SERVING on the same bytes (`expect min-recv 0 binary`: decided at once,
without waiting for more), so a NOT_SERVING answer fails the check as soon
as it arrives rather than at `timeout check`.

Usage:
  make_health_check.py                     # print the tcp-check lines
  make_health_check.py --service=""        # check the whole server
  make_health_check.py --check haproxy.cfg # exit 1 if the file's lines differ
"""

import argparse
import struct
import sys

HEALTH_PATH = "/grpc.health.v1.Health/Check"
DEFAULT_SERVICE = "maxsimd.v1.Reranker"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

FRAME_DATA = 0x0
FRAME_HEADERS = 0x1
FRAME_SETTINGS = 0x4
FLAG_END_STREAM = 0x1
FLAG_END_HEADERS = 0x4

# HPACK static table (RFC 7541, Appendix A) indices used below.
STATIC_AUTHORITY = 1
STATIC_METHOD_POST = 3
STATIC_PATH = 4
STATIC_SCHEME_HTTP = 6
STATIC_CONTENT_TYPE = 31

# grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING = 1
NOT_SERVING = 2


def hpack_int(value, prefix_bits, first_byte_flags):
    """HPACK integer (RFC 7541, 5.1) with `prefix_bits` bits in byte one."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = [first_byte_flags | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_string(text):
    """A string literal without Huffman coding (H bit 0)."""
    raw = text.encode("ascii")
    return hpack_int(len(raw), 7, 0x00) + raw


def literal_indexed_name(index, value):
    """Literal header field without indexing, name from the static table."""
    return hpack_int(index, 4, 0x00) + hpack_string(value)


def literal_new_name(name, value):
    """Literal header field without indexing, new name."""
    return b"\x00" + hpack_string(name) + hpack_string(value)


def frame(frame_type, flags, stream_id, payload):
    """An HTTP/2 frame (RFC 9113, 4.1): 24-bit length, type, flags, stream."""
    if len(payload) >= 1 << 14:
        raise ValueError("frame payload over the default max frame size")
    return (struct.pack(">I", len(payload))[1:] +
            bytes([frame_type, flags]) + struct.pack(">I", stream_id) +
            payload)


def grpc_message(message):
    """gRPC length-prefixed message: uncompressed flag, 4-byte length."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def health_check_request(service):
    """HealthCheckRequest {string service = 1}; empty for the whole server."""
    raw = service.encode("ascii")
    if not raw:
        return b""
    if len(raw) >= 128:
        raise ValueError("service name longer than a one-byte varint")
    return b"\x0a" + bytes([len(raw)]) + raw


def request_bytes(service, authority="localhost"):
    headers = b"".join([
        hpack_int(STATIC_METHOD_POST, 7, 0x80),
        hpack_int(STATIC_SCHEME_HTTP, 7, 0x80),
        literal_indexed_name(STATIC_PATH, HEALTH_PATH),
        literal_indexed_name(STATIC_AUTHORITY, authority),
        literal_indexed_name(STATIC_CONTENT_TYPE, "application/grpc"),
        literal_new_name("te", "trailers"),
    ])
    body = grpc_message(health_check_request(service))
    return b"".join([
        PREFACE,
        frame(FRAME_SETTINGS, 0, 0, b""),
        frame(FRAME_HEADERS, FLAG_END_HEADERS, 1, headers),
        frame(FRAME_DATA, FLAG_END_STREAM, 1, body),
    ])


def response_message(status):
    """The framed HealthCheckResponse {status} the server sends."""
    return grpc_message(bytes([0x08, status]))


def check_lines(service):
    serving = response_message(SERVING).hex()
    any_status = serving[:-2]  # all but the status byte
    comment = f"grpc.health.v1 Check of {service}" if service else \
        "grpc.health.v1 Check of the whole server"
    return [
        "option tcp-check",
        "tcp-check connect",
        f"tcp-check send-binary {request_bytes(service).hex()} "
        f"comment \"{comment}\"",
        f"tcp-check expect rbinary {any_status}0[0-3] "
        "comment \"a HealthCheckResponse\"",
        f"tcp-check expect min-recv 0 binary {serving} "
        "comment \"status SERVING\"",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", default=DEFAULT_SERVICE,
                        help="service to ask about (default %(default)s; "
                             "empty = the whole server)")
    parser.add_argument("--check", metavar="HAPROXY_CFG",
                        help="exit 1 unless every line is in this file")
    args = parser.parse_args()
    lines = check_lines(args.service)
    if args.check is None:
        print("\n".join(lines))
        return 0
    with open(args.check, encoding="utf-8") as f:
        present = {line.strip() for line in f}
    missing = [line for line in lines if line not in present]
    for line in missing:
        print(f"{args.check}: missing or different: {line}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
