"""kafka/mm2_state: MirrorMaker 2's own state, named, encoded and placed as MM2 4.3.1 does (pure parts)."""

from __future__ import annotations

from mirrorflow.kafka import mm2_state
from mirrorflow.model import config
from mirrorflow.rules.anchors import Anchor

BASE = "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nA->B.enabled = true\n"


def test_murmur2_and_the_partition_match_kafkas_java_producer() -> None:
    # Kafka's own test vectors (UtilsTest.testMurmur2), and a key MM2 4.3.1's worker placed in partition 4 of 25.
    assert [mm2_state.murmur2(w.encode()) for w in ("21", "foobar", "a-little-bit-long-string",
                                                   "a-little-bit-longer-string", "abc")] == \
        [-973932308, -790332482, -985981536, -1486304829, 479470107]
    assert mm2_state.murmur2_partition(mm2_state.offset_key("A", "orders", 3), 25) == 4


def test_a_source_offset_is_written_and_read_as_mm2s_connect_worker_does() -> None:
    key = mm2_state.offset_key("A", "orders", 3)
    assert key == b'["MirrorSourceConnector",{"cluster":"A","partition":3,"topic":"orders"}]'
    assert mm2_state.parse_offset(key, mm2_state.offset_value(41), "A") == (("orders", 3), 41)
    assert mm2_state.parse_offset(key, None, "A") == (("orders", 3), None)  # a tombstone
    assert mm2_state.parse_offset(key, b'{"offset":1}', "C") is None  # another flow's
    heartbeat = b'["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]'
    assert mm2_state.parse_offset(heartbeat, b'{"offset":0}', "A") is None
    assert mm2_state.parse_offset(b"not json", b"{}", "A") is None


def test_an_offset_sync_round_trips_in_mm2s_wire_format() -> None:
    key, value = mm2_state.encode_sync("orders", 7, Anchor(1_234, 99))
    assert key == b"\x00\x06orders\x00\x00\x00\x07" and len(value) == 16
    assert mm2_state.decode_sync(key, value) == (("orders", 7), Anchor(1_234, 99))


def test_mm2s_state_is_where_its_dedicated_mode_puts_it_unless_the_file_moves_it() -> None:
    cfg = config.from_text(BASE)
    names = mm2_state.MM2Names.of(cfg, cfg.flow("A->B"))
    assert names == mm2_state.MM2Names("A-mm2", "mm2-offsets.A.internal", "mm2-offset-syncs.B.internal", False)
    cfg = config.from_text(BASE + "B.offset.storage.topic = offsets-of-b\nA->B.offset-syncs.topic.location = target\n"
                           "replication.policy.separator = _\n")
    names = mm2_state.MM2Names.of(cfg, cfg.flow("A->B"))
    assert names == mm2_state.MM2Names("A-mm2", "offsets-of-b", "mm2-offset-syncs_A_internal", True)
    cfg = config.from_text(BASE + "offset.storage.topic = top\nB.offset.storage.topic = b-only\ngroup.id = top-g\n"
                           "B.group.id = b-g\n")
    names = mm2_state.MM2Names.of(cfg, cfg.flow("A->B"))
    assert (names.offsets_topic, names.worker_group) == ("top", "b-g")  # as MM2's workerConfig takes them
