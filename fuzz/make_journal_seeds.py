#!/usr/bin/env python3
"""Writes the seed inputs of the `journal_record` fuzz target from a real
journal segment (for example one left by `updown serve --demo` after a
schemathesis run): usage `make_journal_seeds.py SEGMENT.seg [OUT_DIR]`.

Each seed is one flag byte (see fuzz_targets/journal_record.rs: FIX=1,
SPLIT=2, OPEN=4, GAP=8) followed by segment bytes laid out as in
journal/FORMAT.md, with correct checksums, so the raw (unfixed) mode
starts from valid journals too."""
import os
import struct
import sys
import zlib

FIX, SPLIT, OPEN, GAP = 1, 2, 4, 8
RCRD, SEAL = struct.unpack("<I", b"RCRD")[0], struct.unpack("<I", b"SEAL")[0]


def records(seg):
    off, out = 64, []
    while off + 32 <= len(seg):
        marker, length, seq, kind = struct.unpack_from("<IIQH", seg, off)
        if marker != RCRD:
            break
        out.append((seq, kind, seg[off + 32 : off + 32 + length]))
        off += 32 + ((length + 15) & ~15)
    return out


def record(marker, seq, kind, payload):
    head = bytearray(struct.pack("<IIQHH", marker, len(payload), seq, kind, 0) + bytes(12))
    crc = zlib.crc32(bytes(head[0:20]) + bytes(head[24:32]) + payload)
    head[20:24] = struct.pack("<I", crc)
    return bytes(head) + payload + bytes(-len(payload) % 16)


def segment(index, recs, seal=False):
    first = recs[0][0] if recs else 1
    body = b"".join(record(RCRD, s, k, p) for s, k, p in recs)
    if seal:
        body += record(SEAL, 0, 0, b"")
    length = 64 + len(body) + 32  # room for one more header, zero
    head = bytearray(64)
    head[0:8] = b"UPDNJRNL"
    struct.pack_into("<IIQQQ", head, 8, 1, 0, index, first, length)
    head[60:64] = struct.pack("<I", zlib.crc32(bytes(head[0:60])))
    return bytes(head) + body + bytes(32)


def main():
    src = open(sys.argv[1], "rb").read(16 << 20)
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "corpus", "journal_record")
    recs = records(src)
    # Twenty records around the first order (kind 15, place_order).
    at = next((i for i, r in enumerate(recs) if r[1] == 15), 20)
    orders = recs[max(0, at - 4) : at + 16]
    os.makedirs(out, exist_ok=True)
    seeds = {
        # The start of a venue: configure, series, account, deposit, flags, key.
        "start": bytes([0]) + segment(0, recs[:14]),
        "start_open": bytes([OPEN]) + segment(0, recs[:14]),
        # Orders, cancels and prices later in the journal; checksums fixed by the target.
        "orders_fix": bytes([FIX | OPEN]) + segment(0, orders),
    }
    first, second = recs[:6], recs[6:12]
    a, b = segment(0, first, seal=True), segment(1, second)
    seeds["two_segments"] = bytes([SPLIT]) + struct.pack("<H", len(a)) + a + b
    seeds["missing_segment"] = bytes([SPLIT | GAP | OPEN]) + struct.pack("<H", len(a)) + a + b
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(name, len(data))


main()
