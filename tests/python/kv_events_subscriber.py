"""A KV-event subscriber that decodes kiln's stream the way llm-d's vLLM adapter does
(llm-d-kv-cache `pkg/kvevents/engineadapter/vllm_adapter.go`) and rebuilds the set of cached
block hashes, for tests/it/kv_events.rs.

Usage: kv_events_subscriber.py (bind|connect) PUB_ENDPOINT REPLAY_ENDPOINT TOPIC [SCHEME]

SCHEME is the block hash every stored hash is checked against: "kiln" (the default) or vLLM's
"sha256_cbor" / "sha256_cbor_64bit" (seeded by PYTHONHASHSEED, computed as vLLM does in
vllm_block_hashes.py, from the full parent digests of the blocks seen so far, as an external
indexer must).

A block computed under a LoRA adapter carries the adapter's `lora_id` (an integer) and
`lora_name` (a string, or nil where the sender has none), as vLLM's BlockStored does; a base
model block carries nil for both. The first block of an adapter's chain names no parent, as
vLLM's, but kiln hashes it from the adapter's root (the hash of the block [2^32-1, lora_id]),
which the check follows. The state counts BlockStored events by adapter ("id:name", "nil").

It prints "ready" once its SUB socket is bound or connected, then answers commands on stdin:
  stored N wait until N BlockStored events arrived (over PUB/SUB) and print the state;
  sync N   apply batches up to sequence N-1 (asking the replay socket for any it missed) and
           print the state as one JSON line;
  replay   ask the replay socket for every batch from 0 and print whether each payload equals
           the one received live;
  quit     exit.
Anything that llm-d would refuse, or that breaks vLLM's format, is an error in the state.
"""

import hashlib
import json
import struct
import sys
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
BLOCK_STORED_FIELDS = [
    "block_hashes", "parent_block_hash", "token_ids", "block_size",
    "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
    "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
]
BLOCK_REMOVED_FIELDS = ["block_hashes", "medium", "group_idx"]
# The token of an adapter's root block: no real block holds it.
LORA_ROOT_TOKEN = 2**32 - 1


def hash_as_u64(raw):
    """llm-d's getHashAsUint64: integers as they are, bytes by their last 8 (big-endian)."""
    if isinstance(raw, int):
        return raw & ((1 << 64) - 1)
    if isinstance(raw, bytes) and raw:
        return int.from_bytes(raw[-8:].rjust(8, b"\0"), "big")
    raise ValueError(f"unsupported hash type: {type(raw).__name__}")


def kiln_block_hash(parent, tokens):
    """kiln's documented block hash (src/kv_cache/block/hash.rs), computed independently."""
    data = struct.pack(">Q", parent or 0) + b"".join(struct.pack("<I", t) for t in tokens)
    return int.from_bytes(hashlib.sha256(data).digest()[-8:], "big")


class Verifier:
    """The hash a stored block must have, given its parent's published hash and its tokens."""

    def __init__(self, scheme):
        self.scheme = scheme
        if scheme != "kiln":
            import vllm_block_hashes as vllm
            self.vllm = vllm
            self.hash_fn = vllm.HASH_FUNCTIONS[scheme]
            self.seed_hash = vllm.none_hash(self.hash_fn)
            self.full = {}  # published hash -> vLLM's whole hash, for the children

    def root(self, lora_id):
        """The parent an adapter's first block is hashed from (kiln's first_parent)."""
        if self.scheme == "kiln":
            return kiln_block_hash(None, [LORA_ROOT_TOKEN, lora_id])
        return self.vllm.hash_block_tokens(self.hash_fn, self.seed_hash, None, [LORA_ROOT_TOKEN, lora_id])

    def expected(self, parent, tokens, lora_id=None):
        if parent is None and lora_id is not None:
            if self.scheme == "kiln":
                return kiln_block_hash(self.root(lora_id), tokens)
            block_hash = self.vllm.hash_block_tokens(self.hash_fn, self.seed_hash, self.root(lora_id), tokens)
            published = self.vllm.external(block_hash)
            self.full[published] = block_hash
            return published
        if self.scheme == "kiln":
            return kiln_block_hash(parent, tokens)
        parent_full = None if parent is None else self.full.get(parent)
        if parent is not None and parent_full is None:
            return None  # a parent never seen: nothing to check against
        block_hash = self.vllm.hash_block_tokens(self.hash_fn, self.seed_hash, parent_full, tokens)
        published = self.vllm.external(block_hash)
        self.full[published] = block_hash
        return published


def parse_topic(topic):
    """llm-d's parseVLLMTopic: "kv@<pod>@<model>"."""
    parts = topic.split("@")
    return (parts[1], parts[2]) if len(parts) == 3 else (topic, "")


# The fields vLLM always writes (no default), in its structs' order; the defaulted ones
# (the rest of BLOCK_STORED_FIELDS / BLOCK_REMOVED_FIELDS) it omits when unset.
REQUIRED_FIELDS = {
    "BlockStored": BLOCK_STORED_FIELDS[:7],
    "BlockRemoved": BLOCK_REMOVED_FIELDS[:2],
    "AllBlocksCleared": [],
}


def event_fields(event):
    """A map-encoded event's fields, tag first, in vLLM's order (vLLM writes each event as a
    map tagged by "type" since its PR #42892; the positional arrays before it are refused, as
    vllm-router 0.1.17 refuses them)."""
    if not isinstance(event, dict):
        raise ValueError(f"event is not a tagged map: {event!r}")
    keys = list(event)
    if not keys or keys[0] != "type":
        raise ValueError(f"the tag is not the first key: {keys!r}")
    tag = event["type"]
    allowed = {"BlockStored": BLOCK_STORED_FIELDS, "BlockRemoved": BLOCK_REMOVED_FIELDS}.get(tag, [])
    unknown = [k for k in keys[1:] if k not in allowed]
    missing = [k for k in REQUIRED_FIELDS.get(tag, []) if k not in event]
    if unknown or missing:
        raise ValueError(f"{tag}: unknown fields {unknown!r}, missing {missing!r}")
    return [tag] + [event[name] for name in REQUIRED_FIELDS.get(tag, [])]


class Index:
    def __init__(self, topic, scheme="kiln"):
        self.topic = topic
        self.verifier = Verifier(scheme)
        # Hashes per medium, as llm-d's precise-prefix scorer keeps them: "GPU" is kiln's
        # prefix cache, "CPU" its host swap pool.
        self.tiers = {"GPU": set(), "CPU": set()}
        self.hashes = self.tiers["GPU"]
        self.next_seq = 0
        self.payloads = {}
        self.counts = {
            "BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0, "replayed": 0,
            "BlockStored:CPU": 0, "BlockRemoved:CPU": 0,
        }
        # BlockStored events by adapter: "lora_id:lora_name", "nil" for the base model.
        self.stored_by_lora = {}
        self.errors = []

    def error(self, message):
        if len(self.errors) < 20:
            self.errors.append(message)

    def receive(self, parts, replayed=False):
        """One [topic, seq, payload] message, applied in sequence order exactly once."""
        if len(parts) != 3:
            self.error(f"expected 3 message parts, got {len(parts)}")
            return
        topic, seq_bytes, payload = parts
        if len(seq_bytes) != 8:
            self.error(f"invalid sequence bytes length: {len(seq_bytes)}")
            return
        seq = int.from_bytes(seq_bytes, "big")
        if topic.decode() != self.topic or parse_topic(topic.decode()) != parse_topic(self.topic):
            self.error(f"topic {topic!r}")
        if seq != self.next_seq:
            return  # a duplicate (already applied), or ahead of a gap the replay fills
        self.payloads[seq] = payload
        self.next_seq += 1
        self.counts["replayed"] += replayed
        self.apply_batch(payload)

    def apply_batch(self, payload):
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if not (isinstance(batch, list) and len(batch) in (2, 3)):
            self.error(f"batch is not [ts, events, dp_rank?]: {batch!r}")
            return
        ts, events = batch[0], batch[1]
        if not isinstance(ts, float) or not isinstance(events, list):
            self.error(f"batch types: {type(ts).__name__}, {type(events).__name__}")
            return
        if len(batch) == 3 and batch[2] != 0:
            self.error(f"data_parallel_rank {batch[2]!r}")
        for event in events:
            try:
                fields = event_fields(event)
            except ValueError as e:
                self.error(str(e))
                continue
            self.apply_event(fields)

    def apply_event(self, fields):
        tag = fields[0] if fields else None
        if tag == "BlockStored":
            if len(fields) != 8:  # the tag and the 7 fields vLLM always writes
                self.error(f"BlockStored has {len(fields)} fields")
            hashes = [hash_as_u64(h) for h in fields[1]]
            parent = None if fields[2] is None else hash_as_u64(fields[2])
            tokens, block_size = fields[3], fields[4]
            if not all(isinstance(t, int) for t in tokens) or not isinstance(block_size, int):
                self.error("BlockStored: token_ids or block_size not integers")
                return
            lora_id, medium, lora_name = fields[5:8]
            lora_ok = (lora_id is None and lora_name is None) or (
                isinstance(lora_id, int) and lora_id >= 0 and (lora_name is None or isinstance(lora_name, str))
            )
            if not lora_ok or medium not in self.tiers:
                self.error(f"BlockStored: lora_id/medium/lora_name {fields[5:8]!r}")
                return
            adapter = "nil" if lora_id is None else f"{lora_id}:{lora_name}"
            self.stored_by_lora[adapter] = self.stored_by_lora.get(adapter, 0) + 1
            tier = self.tiers[fields[6]]
            if len(tokens) != block_size * len(hashes):
                self.error(f"BlockStored: {len(tokens)} tokens for {len(hashes)} blocks of {block_size}")
                return
            for i, h in enumerate(hashes):
                expected = self.verifier.expected(parent, tokens[i * block_size:(i + 1) * block_size], lora_id)
                if h != expected:
                    self.error(f"BlockStored: hash {h:#x} is not the hash of its parent and tokens")
                if h in tier:
                    self.error(f"BlockStored: {h:#x} stored twice in {fields[6]}")
                tier.add(h)
                parent = h
            self.counts["BlockStored" if fields[6] == "GPU" else "BlockStored:CPU"] += 1
        elif tag == "BlockRemoved":
            if len(fields) != 3 or fields[2] not in self.tiers:
                self.error(f"BlockRemoved fields {fields!r}")
                return
            tier = self.tiers[fields[2]]
            for h in fields[1]:
                h = hash_as_u64(h)
                if h not in tier:
                    self.error(f"BlockRemoved: {h:#x} was never stored in {fields[2]}")
                tier.discard(h)
            self.counts["BlockRemoved" if fields[2] == "GPU" else "BlockRemoved:CPU"] += 1
        elif tag == "AllBlocksCleared":
            if len(fields) != 1:
                self.error(f"AllBlocksCleared fields {fields!r}")
            for tier in self.tiers.values():
                tier.clear()
            self.counts["AllBlocksCleared"] += 1
        else:
            self.error(f"unknown vLLM event tag: {tag!r}")

    def state(self):
        return {
            "hashes": sorted(self.hashes),
            "cpu_hashes": sorted(self.tiers["CPU"]),
            "next_seq": self.next_seq,
            "counts": self.counts,
            "stored_by_lora": self.stored_by_lora,
            "errors": self.errors,
        }


def replay_from(dealer, start):
    """Every buffered [topic, seq, payload] from `start`, up to the end marker."""
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    messages = []
    while dealer.poll(5000):
        frames = dealer.recv_multipart()
        if frames[0] != b"" or len(frames) != 4:
            raise ValueError(f"replay frames {frames!r}")
        if frames[2] == END_SEQ:
            return messages
        messages.append(frames[1:])
    raise TimeoutError("no end marker from the replay socket")


def main():
    mode, pub_endpoint, replay_endpoint, topic = sys.argv[1:5]
    scheme = sys.argv[5] if len(sys.argv) > 5 else "kiln"
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt_string(zmq.SUBSCRIBE, topic)
    (sub.bind if mode == "bind" else sub.connect)(pub_endpoint)
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay_endpoint)
    index = Index(topic, scheme)
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "sync":
            target = int(command[1])
            while index.next_seq < target:
                if sub.poll(200):
                    index.receive(sub.recv_multipart())
                else:  # missed (sent before the subscription took): ask the replay socket
                    for parts in replay_from(dealer, index.next_seq):
                        index.receive(parts, replayed=True)
            while sub.poll(0):  # what arrived live meanwhile is a duplicate or later
                index.receive(sub.recv_multipart())
            print(json.dumps(index.state()), flush=True)
        elif command[0] == "stored":
            target, deadline = int(command[1]), time.monotonic() + 60
            while index.counts["BlockStored"] < target and time.monotonic() < deadline:
                if sub.poll(200):
                    index.receive(sub.recv_multipart())
                else:  # a gap (sent before the subscription took) is filled from the replay
                    for parts in replay_from(dealer, index.next_seq):
                        index.receive(parts, replayed=True)
            print(json.dumps(index.state()), flush=True)
        elif command[0] == "replay":
            replayed = replay_from(dealer, 0)
            same = [int.from_bytes(s, "big") for _, s, p in replayed if index.payloads.get(int.from_bytes(s, "big")) == p]
            print(json.dumps({"replayed": len(replayed), "same": len(same), "seen": len(index.payloads)}), flush=True)
        elif command[0] == "quit":
            return


if __name__ == "__main__":
    main()
