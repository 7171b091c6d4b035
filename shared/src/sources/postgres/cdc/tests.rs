use super::*;

#[test]
fn a_snapshot_saw_the_transactions_below_xmin_and_the_finished_ones_below_xmax() {
    let f = SnapshotFilter::parse("100:105:101,103", 7).unwrap();
    assert_eq!(f.xip, vec![101, 103]);
    for (xid, saw) in [
        (99, true),
        (100, true),
        (101, false),
        (102, true),
        (103, false),
        (104, true),
        (105, false),
        (200, false),
    ] {
        assert_eq!(f.saw(xid), saw, "{xid}");
    }
    assert_eq!(
        SnapshotFilter::parse("5:5:", 1).unwrap().xip,
        Vec::<u64>::new()
    );
    for bad in ["", "1", "1:x:", "1:2:3:4", "1:2:a"] {
        assert!(SnapshotFilter::parse(bad, 0).is_none(), "{bad}");
    }
    // 64-bit ids in a later epoch: a 32-bit id is placed in the epoch around xmax.
    let epoch = 3u64 << 32;
    let f = SnapshotFilter::parse(&format!("{}:{}:", epoch + 10, epoch + 20), 0).unwrap();
    assert!(f.saw(5));
    assert!(!f.saw(25));
    // Just below an epoch boundary, ids of the epoch before are old.
    let f = SnapshotFilter::parse(&format!("{}:{}:", epoch + 2, epoch + 4), 0).unwrap();
    assert!(f.saw(u32::MAX));
    assert!(!f.saw(4));
}
