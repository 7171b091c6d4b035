use super::*;

#[test]
fn crc32c_is_castagnoli_by_its_known_answers() {
    // The standard check value of CRC-32C (Castagnoli) for "123456789".
    assert_eq!(crc32c(&[b"123456789"]), 0xE306_9283);
    // Split input gives the same answer as one slice.
    assert_eq!(crc32c(&[b"1234", b"56789"]), 0xE306_9283);
    // 32 zero bytes: RFC 3720 (iSCSI) appendix B.4 test vector.
    assert_eq!(crc32c(&[&[0u8; 32]]), 0x8A91_36AA);
    // Not CRC-32 (IEEE), whose check value is 0xCBF43926.
    assert_ne!(crc32c(&[b"123456789"]), 0xCBF4_3926);
}

#[test]
fn segment_header_bytes_are_pinned() {
    let header = SegmentHeader {
        first_batch_id: 0x0102_0304_0506_0708,
        previous_position: Some(b"ab".to_vec()),
    };
    let bytes = header.encode();
    let mut expected = vec![
        b'S', b'K', b'P', b'R', b'W', b'A', b'L', 0, // magic
        1, 0, // version 1
        1, 0, // flags: has previous position
        8, 7, 6, 5, 4, 3, 2, 1, // first batch id, little-endian
        2, 0, 0, 0, // position length
        b'a', b'b', // position
    ];
    let crc = crc32c(&[&expected]);
    expected.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(bytes, expected);
    assert_eq!(crc, 0xD332_8101, "header CRC {crc:#010x}");
    let (decoded, len) = SegmentHeader::decode(&bytes, Path::new("x")).unwrap();
    assert_eq!(decoded, header);
    assert_eq!(len, 30);
}

#[test]
fn segment_header_without_position_has_clear_flags_and_no_position_bytes() {
    let header = SegmentHeader {
        first_batch_id: 1,
        previous_position: None,
    };
    let bytes = header.encode();
    assert_eq!(bytes.len(), 28);
    assert_eq!(
        &bytes[8..24],
        &[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let (decoded, _) = SegmentHeader::decode(&bytes, Path::new("x")).unwrap();
    assert_eq!(decoded, header);
    // An empty position is still a position.
    let empty = SegmentHeader {
        first_batch_id: 1,
        previous_position: Some(Vec::new()),
    };
    let (decoded, _) = SegmentHeader::decode(&empty.encode(), Path::new("x")).unwrap();
    assert_eq!(decoded.previous_position, Some(Vec::new()));
}

#[test]
fn record_header_bytes_are_pinned() {
    let (header, bytes) = encode_record(RecordKind::Commit, 5, &commit_payload(28, 0xAABB_CCDD));
    let mut expected = vec![
        0xC5, b'W', b'R', b'C', // magic
        2, 0, 0, 0, // kind commit, reserved
        5, 0, 0, 0, 0, 0, 0, 0, // batch id
        12, 0, 0, 0, // payload length
    ];
    let crc = crc32c(&[&expected, &commit_payload(28, 0xAABB_CCDD)]);
    expected.extend_from_slice(&crc.to_le_bytes());
    expected.extend_from_slice(&[28, 0, 0, 0, 0, 0, 0, 0, 0xDD, 0xCC, 0xBB, 0xAA]);
    assert_eq!(bytes, expected);
    assert_eq!(header.crc, crc);
    assert_eq!(bytes.len() as u64, COMMIT_RECORD_LEN);
    assert_eq!(RecordHeader::decode(&bytes).unwrap(), header);
}

#[test]
fn record_header_rejects_bad_magic_unknown_kind_and_reserved_bytes() {
    let (_, mut bytes) = encode_record(RecordKind::Reclaim, 1, &[]);
    assert!(
        RecordHeader::decode(&bytes[..10])
            .unwrap_err()
            .contains("cut short")
    );
    bytes[5] = 1;
    assert!(
        RecordHeader::decode(&bytes)
            .unwrap_err()
            .contains("reserved")
    );
    bytes[4] = 9;
    assert!(
        RecordHeader::decode(&bytes)
            .unwrap_err()
            .contains("unknown record kind 9")
    );
    bytes[0] = 0;
    assert!(
        RecordHeader::decode(&bytes)
            .unwrap_err()
            .contains("bad record magic")
    );
}

#[test]
fn a_segment_header_with_a_flipped_byte_is_corrupt_and_a_future_version_is_unsupported() {
    let mut bytes = SegmentHeader {
        first_batch_id: 3,
        previous_position: None,
    }
    .encode();
    bytes[13] ^= 0x40;
    let error = SegmentHeader::decode(&bytes, Path::new("s")).unwrap_err();
    assert!(
        matches!(error, WalError::Corrupt { offset: 24, .. }),
        "{error}"
    );
    bytes[8] = 2;
    let error = SegmentHeader::decode(&bytes, Path::new("s")).unwrap_err();
    assert!(
        matches!(error, WalError::UnsupportedVersion { found: 2, .. }),
        "{error}"
    );
    let error = SegmentHeader::decode(b"PAR1xxxx", Path::new("s")).unwrap_err();
    assert!(matches!(error, WalError::BadMagic { .. }), "{error}");
}

/// A batch whose strings compress well (the same value on every row).
fn repetitive(rows: usize) -> arrow::record_batch::RecordBatch {
    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
    let s: StringArray = (0..rows)
        .map(|_| Some("the same text on every row"))
        .collect();
    arrow::record_batch::RecordBatch::try_new(schema, vec![std::sync::Arc::new(s)]).unwrap()
}

#[test]
fn a_payload_with_either_compression_decodes_to_the_same_batch() {
    use crate::wal::conformance::part;
    use crate::wal::{BatchId, WalCompression};
    let parts = [part("a", 1, repetitive(10_000))];
    let encode = |compression| {
        encode_data_payload(BatchId(7), b"pos", &parts, compression)
            .unwrap()
            .0
    };
    let (lz4, none) = (encode(WalCompression::Lz4), encode(WalCompression::None));
    // `none` leaves the values as they are; lz4 shrinks them (10,000 x 26 bytes of text).
    assert!(
        none.len() > 260_000,
        "uncompressed payload {} bytes",
        none.len()
    );
    assert!(
        lz4.len() * 5 < none.len(),
        "lz4 {} vs none {}",
        lz4.len(),
        none.len()
    );
    let needle = b"the same text on every rowthe same text";
    assert!(none.windows(needle.len()).any(|w| w == needle));
    assert!(!lz4.windows(needle.len()).any(|w| w == needle));
    for payload in [&lz4, &none] {
        let decoded = decode_parts(BatchId(7), payload, Path::new("x"), 0).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].batch, parts[0].batch);
        assert_eq!(decoded[0].namespace, "a");
    }
}

#[test]
fn a_disk_wal_reads_back_batches_written_with_either_compression() {
    use crate::wal::conformance::part;
    use crate::wal::{DiskWal, WalCompression, WalOptions};
    let dir = tempfile::tempdir().unwrap();
    let options = |compression| WalOptions {
        fsync: false,
        compression,
        ..WalOptions::default()
    };
    let (mut wal, _) = DiskWal::open(dir.path(), options(WalCompression::Lz4)).unwrap();
    let small = wal
        .append(b"1", &[part("a", 1, repetitive(5_000))])
        .unwrap();
    drop(wal);
    // Reopened with the other setting (WAL_COMPRESSION changed between runs).
    let (mut wal, recovery) = DiskWal::open(dir.path(), options(WalCompression::None)).unwrap();
    assert!(recovery.warnings.is_empty(), "{:?}", recovery.warnings);
    let large = wal
        .append(b"2", &[part("a", 1, repetitive(5_000))])
        .unwrap();
    assert!(
        large.bytes > small.bytes * 5,
        "{} vs {}",
        large.bytes,
        small.bytes
    );
    drop(wal);
    let (wal, _) = DiskWal::open(dir.path(), options(WalCompression::Lz4)).unwrap();
    for (meta, position) in wal.batches().iter().zip([b"1", b"2"]) {
        assert_eq!(meta.position, position);
        let parts = wal.read(meta.id).unwrap();
        assert_eq!(parts[0].batch, repetitive(5_000));
    }
    assert_eq!(wal.batches().len(), 2);
}

#[test]
fn a_disk_wal_is_left_uncompressed_only_when_a_destination_takes_its_batches() {
    use crate::wal::WalCompression as C;
    for (disk, has_destination, expected) in [
        (true, true, C::None),
        (true, false, C::Lz4),
        (false, true, C::Lz4),
        (false, false, C::Lz4),
    ] {
        let got = C::default_for(disk, has_destination);
        assert_eq!(got, expected, "disk {disk}, destination {has_destination}");
    }
    assert_eq!(C::default(), C::Lz4);
}
