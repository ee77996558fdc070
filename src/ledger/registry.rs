//! The topic's cursors: creating, reopening and deleting them by name.
//!
//! Owns: the cursor table of the topic record (client name -> numeric id) and the order in
//! which cursor records and the table change, so a crash at any step leaves either the old or
//! the new cursor set (orphans are removed by the next open, see `open.rs`):
//! - create: write `cursor-{id}` (the new id is `next_cursor_id`), then the topic record that
//!   lists it (the commit point);
//! - delete: write the topic record without it (the commit point), then delete `cursor-{id}`,
//!   then its cursor ledger.
//!
//! Names are client data: they live inside records and never become file names.

use std::sync::Arc;

use super::topic::TopicCore;
use crate::cursor::{self, Cursor, CursorOptions, CursorShared, CursorState, TopicAccess};
use crate::error::{Error, Result};
use crate::format::meta::{CursorEntry, CursorRecord};

impl TopicCore {
    /// Opens cursor `name`, creating it at `options` when it does not exist; see
    /// `ManagedLedger::open_cursor`.
    pub(crate) fn open_cursor(
        self: &Arc<Self>,
        name: &str,
        options: CursorOptions,
    ) -> Result<Cursor> {
        self.log()?;
        let mut w = self.writer();
        if let Some(open) = self.cursors().get(name).filter(|c| !c.is_closed()) {
            return Ok(Cursor::from_shared(open.clone()));
        }
        let acks = cursor::new_ack_set(&self.config.cursor);
        let listed = w
            .record
            .cursors
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id);
        let id = listed.unwrap_or(w.record.next_cursor_id);
        let record_name = cursor::record_name(id);
        let found = self.meta.get(&record_name)?;
        let (state, version) = if let (Some(_), Some((version, bytes))) = (listed, &found) {
            let record = CursorRecord::decode(bytes)?;
            let state = CursorState::from_record(&record, &self.layout(), acks);
            (state, *version)
        } else {
            // A new cursor; or one listed without a record (removed by hand), which starts
            // again from `options`. A record found for an unlisted id was left by a creation
            // cut short and is replaced.
            let state = CursorState::initial(&self.layout(), options, acks);
            let bytes = state.to_record(name).encode();
            let version = self.meta.put(&record_name, found.map(|(v, _)| v), &bytes)?;
            if listed.is_none() {
                let mut record = w.record.clone();
                record.cursors.push(CursorEntry {
                    name: name.to_owned(),
                    id,
                });
                record.next_cursor_id = id + 1;
                self.commit(&mut w, record)?;
            }
            (state, version)
        };
        let topic: Arc<dyn TopicAccess> = self.clone();
        let shared = CursorShared::new(id, name.to_owned(), topic, state, version);
        self.cursors().insert(name.to_owned(), shared.clone());
        Ok(Cursor::from_shared(shared))
    }

    /// Deletes cursor `name`: its record, its cursor ledger, and every open handle to it.
    pub(crate) fn delete_cursor(&self, name: &str) -> Result<()> {
        let log = self.log()?;
        let mut w = self.writer();
        let Some(id) = w
            .record
            .cursors
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id)
        else {
            return Err(Error::NoSuchCursor(name.to_owned()));
        };
        let mut record = w.record.clone();
        record.cursors.retain(|c| c.id != id);
        self.commit(&mut w, record)?;
        if let Some(open) = self.cursors().remove(name) {
            open.mark_closed();
        }
        let record_name = cursor::record_name(id);
        if let Some((version, bytes)) = self.meta.get(&record_name)? {
            self.meta.delete(&record_name, version)?;
            if let Some(ledger) = CursorRecord::decode(&bytes)?.cursor_ledger {
                match log.delete_ledger(ledger) {
                    Ok(()) | Err(Error::NoSuchLedger(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Names of every cursor, open or not, sorted.
    pub(crate) fn cursor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .writer()
            .record
            .cursors
            .iter()
            .map(|c| c.name.clone())
            .collect();
        names.sort();
        names
    }
}
