//! The messages of PostgreSQL's `pgoutput` logical decoding plugin, protocol version 1 (the
//! "Logical Replication Message Formats" chapter of the PostgreSQL manual), as the SQL
//! function `pg_logical_slot_peek_binary_changes` returns them: one message per row.
//!
//! Pure parsing, no I/O: a malformed message is an error saying which field ran short, never
//! a panic.

/// One decoded message; kinds this source has no use for are [`Message::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// A transaction starts.
    Begin {
        /// Where its commit record starts (the LSN PostgreSQL orders and confirms by).
        final_lsn: u64,
        /// Commit time, microseconds after 2000-01-01 UTC.
        commit_time: i64,
        /// Its transaction id.
        xid: u32,
    },
    /// The transaction ends.
    Commit {
        /// Where its commit record starts.
        commit_lsn: u64,
        /// Where its commit record ends.
        end_lsn: u64,
    },
    /// A table's columns, sent before its first change in a decoding session and after each
    /// change of its definition.
    Relation(Relation),
    /// A row was inserted.
    Insert {
        /// The table's relation id.
        relation: u32,
        /// The new row.
        new: Vec<Cell>,
    },
    /// A row was updated.
    Update {
        /// The table's relation id.
        relation: u32,
        /// The old row's key (`K`, when the key changed) or whole old row (`O`, under
        /// `REPLICA IDENTITY FULL`).
        old: Option<Vec<Cell>>,
        /// `old` is the whole old row (`O`), not just its key.
        old_full: bool,
        /// The new row.
        new: Vec<Cell>,
    },
    /// A row was deleted.
    Delete {
        /// The table's relation id.
        relation: u32,
        /// The old row's key, or the whole old row under `REPLICA IDENTITY FULL`.
        old: Vec<Cell>,
    },
    /// Tables were truncated.
    Truncate {
        /// Their relation ids.
        relations: Vec<u32>,
    },
    /// Origin, type and logical messages: nothing to deliver.
    Other(u8),
}

/// A table as a `Relation` message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relation {
    /// The relation id the change messages refer to.
    pub id: u32,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// Its columns, in table order.
    pub columns: Vec<RelationColumn>,
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelationColumn {
    /// Part of the replica identity (the key deletes and key-changing updates carry).
    pub key: bool,
    /// The column's name.
    pub name: String,
    /// Its type's oid.
    pub type_oid: u32,
    /// Its type modifier (`numeric(p, s)`'s precision and scale; -1 for none).
    pub type_modifier: i32,
}

/// One column value of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    /// NULL.
    Null,
    /// A TOASTed value the change did not touch: not sent.
    Unchanged,
    /// The value in the type's text form.
    Text(Vec<u8>),
    /// The value in the type's binary form (only when asked with `binary`).
    Binary(Vec<u8>),
}

/// Reads big-endian fields off a message, naming what ran short.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                Ok(out)
            }
            None => Err(format!(
                "the message ends at byte {} inside {what}",
                self.bytes.len()
            )),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A NUL-terminated string.
    fn string(&mut self, what: &str) -> Result<String, String> {
        let rest = &self.bytes[self.at..];
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(format!("{what} has no terminating NUL"));
        };
        let text = String::from_utf8_lossy(&rest[..len]).into_owned();
        self.at += len + 1;
        Ok(text)
    }

    fn tuple(&mut self) -> Result<Vec<Cell>, String> {
        let n = self.u16("a tuple's column count")?;
        let mut cells = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let cell = match self.u8("a column's kind")? {
                b'n' => Cell::Null,
                b'u' => Cell::Unchanged,
                kind @ (b't' | b'b') => {
                    let len = self.u32("a column's length")?;
                    let len = usize::try_from(len).map_err(|_| "a column length too large")?;
                    let bytes = self.take(len, "a column's value")?.to_vec();
                    if kind == b't' {
                        Cell::Text(bytes)
                    } else {
                        Cell::Binary(bytes)
                    }
                }
                other => return Err(format!("unknown column kind {:?}", char::from(other))),
            };
            cells.push(cell);
        }
        Ok(cells)
    }
}

/// Parse one `pgoutput` message.
pub(crate) fn parse(bytes: &[u8]) -> Result<Message, String> {
    let mut r = Reader { bytes, at: 0 };
    let kind = r.u8("the message kind")?;
    Ok(match kind {
        b'B' => {
            let final_lsn = r.u64("Begin's final LSN")?;
            let commit_time = r.u64("Begin's commit time")? as i64;
            let xid = r.u32("Begin's xid")?;
            Message::Begin {
                final_lsn,
                commit_time,
                xid,
            }
        }
        b'C' => {
            let _flags = r.u8("Commit's flags")?;
            let commit_lsn = r.u64("Commit's LSN")?;
            let end_lsn = r.u64("Commit's end LSN")?;
            let _time = r.u64("Commit's time")?;
            Message::Commit {
                commit_lsn,
                end_lsn,
            }
        }
        b'R' => {
            let id = r.u32("Relation's id")?;
            let schema = r.string("Relation's schema")?;
            let name = r.string("Relation's name")?;
            let _identity = r.u8("Relation's replica identity")?;
            let n = r.u16("Relation's column count")?;
            let mut columns = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let flags = r.u8("a column's flags")?;
                let name = r.string("a column's name")?;
                let type_oid = r.u32("a column's type")?;
                let type_modifier = r.u32("a column's type modifier")?.cast_signed();
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name,
                    type_oid,
                    type_modifier,
                });
            }
            Message::Relation(Relation {
                id,
                schema,
                name,
                columns,
            })
        }
        b'I' => {
            let relation = r.u32("Insert's relation")?;
            match r.u8("Insert's tuple kind")? {
                b'N' => Message::Insert {
                    relation,
                    new: r.tuple()?,
                },
                other => return Err(format!("Insert with tuple kind {:?}", char::from(other))),
            }
        }
        b'U' => {
            let relation = r.u32("Update's relation")?;
            let mut old = None;
            let mut kind = r.u8("Update's tuple kind")?;
            let old_full = kind == b'O';
            if kind == b'K' || kind == b'O' {
                old = Some(r.tuple()?);
                kind = r.u8("Update's new tuple kind")?;
            }
            if kind != b'N' {
                return Err(format!("Update with tuple kind {:?}", char::from(kind)));
            }
            Message::Update {
                relation,
                old,
                old_full,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32("Delete's relation")?;
            match r.u8("Delete's tuple kind")? {
                b'K' | b'O' => Message::Delete {
                    relation,
                    old: r.tuple()?,
                },
                other => return Err(format!("Delete with tuple kind {:?}", char::from(other))),
            }
        }
        b'T' => {
            let n = r.u32("Truncate's relation count")?;
            let _options = r.u8("Truncate's options")?;
            let mut relations = Vec::new();
            for _ in 0..n {
                relations.push(r.u32("a truncated relation")?);
            }
            Message::Truncate { relations }
        }
        other => Message::Other(other),
    })
}

/// An LSN as PostgreSQL prints it (`16/B374D848`).
pub(crate) fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// An LSN from PostgreSQL's text (`16/B374D848`).
pub(crate) fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.trim().split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    (high <= 0xFFFF_FFFF && low <= 0xFFFF_FFFF).then_some((high << 32) | low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(cells: &[Option<&str>]) -> Vec<u8> {
        let mut out = (cells.len() as u16).to_be_bytes().to_vec();
        for cell in cells {
            match cell {
                None => out.push(b'n'),
                Some("\u{0}toast") => out.push(b'u'),
                Some(text) => {
                    out.push(b't');
                    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
                    out.extend_from_slice(text.as_bytes());
                }
            }
        }
        out
    }

    #[test]
    fn every_kind_of_message_parses_to_its_fields() {
        let mut begin = vec![b'B'];
        begin.extend_from_slice(&0x1_0000_0010u64.to_be_bytes());
        begin.extend_from_slice(&123_456i64.to_be_bytes());
        begin.extend_from_slice(&777u32.to_be_bytes());
        assert_eq!(
            parse(&begin).unwrap(),
            Message::Begin {
                final_lsn: 0x1_0000_0010,
                commit_time: 123_456,
                xid: 777
            }
        );

        let mut commit = vec![b'C', 0];
        commit.extend_from_slice(&10u64.to_be_bytes());
        commit.extend_from_slice(&20u64.to_be_bytes());
        commit.extend_from_slice(&5i64.to_be_bytes());
        assert_eq!(
            parse(&commit).unwrap(),
            Message::Commit {
                commit_lsn: 10,
                end_lsn: 20
            }
        );

        let mut relation = vec![b'R'];
        relation.extend_from_slice(&16384u32.to_be_bytes());
        relation.extend_from_slice(b"public\0ev\0d");
        relation.extend_from_slice(&2u16.to_be_bytes());
        relation.push(1);
        relation.extend_from_slice(b"id\0");
        relation.extend_from_slice(&23u32.to_be_bytes());
        relation.extend_from_slice(&(-1i32).to_be_bytes());
        relation.push(0);
        relation.extend_from_slice(b"v\0");
        relation.extend_from_slice(&1700u32.to_be_bytes());
        // numeric(12,3): (12 << 16 | 3) + 4.
        relation.extend_from_slice(&((12i32 << 16 | 3) + 4).to_be_bytes());
        let Message::Relation(r) = parse(&relation).unwrap() else {
            panic!("not a relation")
        };
        assert_eq!(
            (r.id, r.schema.as_str(), r.name.as_str()),
            (16384, "public", "ev")
        );
        assert_eq!(
            r.columns,
            vec![
                RelationColumn {
                    key: true,
                    name: "id".into(),
                    type_oid: 23,
                    type_modifier: -1
                },
                RelationColumn {
                    key: false,
                    name: "v".into(),
                    type_oid: 1700,
                    type_modifier: (12 << 16 | 3) + 4
                }
            ]
        );

        let mut insert = vec![b'I'];
        insert.extend_from_slice(&16384u32.to_be_bytes());
        insert.push(b'N');
        insert.extend(tuple(&[Some("1"), None]));
        assert_eq!(
            parse(&insert).unwrap(),
            Message::Insert {
                relation: 16384,
                new: vec![Cell::Text(b"1".to_vec()), Cell::Null]
            }
        );

        let mut update = vec![b'U'];
        update.extend_from_slice(&16384u32.to_be_bytes());
        update.push(b'K');
        update.extend(tuple(&[Some("1"), None]));
        update.push(b'N');
        update.extend(tuple(&[Some("2"), Some("\u{0}toast")]));
        assert_eq!(
            parse(&update).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some(vec![Cell::Text(b"1".to_vec()), Cell::Null]),
                old_full: false,
                new: vec![Cell::Text(b"2".to_vec()), Cell::Unchanged]
            }
        );

        let mut delete = vec![b'D'];
        delete.extend_from_slice(&16384u32.to_be_bytes());
        delete.push(b'K');
        delete.extend(tuple(&[Some("2"), None]));
        assert_eq!(
            parse(&delete).unwrap(),
            Message::Delete {
                relation: 16384,
                old: vec![Cell::Text(b"2".to_vec()), Cell::Null]
            }
        );

        let mut truncate = vec![b'T'];
        truncate.extend_from_slice(&2u32.to_be_bytes());
        truncate.push(0);
        truncate.extend_from_slice(&1u32.to_be_bytes());
        truncate.extend_from_slice(&2u32.to_be_bytes());
        assert_eq!(
            parse(&truncate).unwrap(),
            Message::Truncate {
                relations: vec![1, 2]
            }
        );
        assert_eq!(parse(b"Yxyz").unwrap(), Message::Other(b'Y'));
    }

    #[test]
    fn a_message_cut_short_is_an_error_naming_the_field_never_a_panic() {
        let mut insert = vec![b'I'];
        insert.extend_from_slice(&1u32.to_be_bytes());
        insert.push(b'N');
        insert.extend(tuple(&[Some("12345")]));
        for cut in 0..insert.len() {
            let error = parse(&insert[..cut]).unwrap_err();
            assert!(
                error.contains("ends at byte") || error.contains("kind"),
                "{error}"
            );
        }
        assert!(parse(b"R\0\0\0\x01public").unwrap_err().contains("NUL"));
        let mut bad = vec![b'I'];
        bad.extend_from_slice(&1u32.to_be_bytes());
        bad.push(b'N');
        bad.extend_from_slice(&1u16.to_be_bytes());
        bad.push(b'z');
        assert!(parse(&bad).unwrap_err().contains("unknown column kind"));
        // A length past the end is refused, not allocated.
        let mut huge = vec![b'I'];
        huge.extend_from_slice(&1u32.to_be_bytes());
        huge.push(b'N');
        huge.extend_from_slice(&1u16.to_be_bytes());
        huge.push(b't');
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse(&huge).unwrap_err().contains("ends at byte"));
    }

    #[test]
    fn lsns_print_and_parse_as_postgresql_does() {
        for lsn in [0u64, 0x16_B374_D848, u64::MAX, 1 << 32] {
            assert_eq!(parse_lsn(&lsn_text(lsn)), Some(lsn));
        }
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
        assert_eq!(parse_lsn("0/16B3748"), Some(0x16B_3748));
        for bad in ["", "16", "x/1", "1/", "100000000/0"] {
            assert_eq!(parse_lsn(bad), None, "{bad}");
        }
    }
}
