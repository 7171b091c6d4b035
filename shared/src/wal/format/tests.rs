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
