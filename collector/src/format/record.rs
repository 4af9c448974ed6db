//! The records a trace holds after its header (the types are the event model's,
//! `event/records.rs`), and their wire tags.

pub use crate::event::records::{
    Alert, Attachment, End, Lookup, Module, PyCode, PyFrame, PyStackDef, Segment, StackDef, Stats,
};
pub use crate::event::snapshot::{SegmentEnd, Snapshot};
use crate::event::Event;

/// Declares [`Record`] with each kind's wire tag, and its payload's encoding (postcard's; events
/// are written and read by `events.rs`).
macro_rules! records {
    ($($(#[$doc:meta])* $kind:ident($type:ty) = $tag:literal,)*) => {
        /// Everything that can follow the header.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Record {
            $($(#[$doc])* $kind($type),)*
        }

        impl Record {
            pub(crate) fn tag(&self) -> u64 {
                match self {
                    $(Record::$kind(_) => $tag,)*
                }
            }

            /// Appends the payload (without tag) to `out`.
            pub(crate) fn encode_payload(&self, out: Vec<u8>) -> postcard::Result<Vec<u8>> {
                match self {
                    $(Record::$kind(v) => postcard::to_extend(v, out),)*
                }
            }

            /// Decodes a payload; `None` for a tag or variant this reader does not know. Trailing
            /// bytes are allowed: a newer writer may append fields.
            pub(crate) fn decode(tag: u64, payload: &[u8]) -> Option<Record> {
                $(
                    if tag == $tag {
                        let (v, _) = postcard::take_from_bytes(payload).ok()?;
                        return Some(Record::$kind(v));
                    }
                )*
                None
            }
        }
    };
}

records! {
    Event(Event) = 1,
    Module(Module) = 2,
    Stack(StackDef) = 3,
    Stats(Stats) = 4,
    Lookup(Lookup) = 5,
    /// A problem of the tracer's own (bad setting, failed write) that users should see.
    Warning(String) = 6,
    End(End) = 7,
    PyCode(PyCode) = 8,
    PyStack(PyStackDef) = 9,
    Attachment(Attachment) = 10,
    /// An alert raised while the program ran.
    Alert(Box<Alert>) = 11,
    /// The live state a segment of a trace starts from.
    Snapshot(Box<Snapshot>) = 12,
    /// The last record of a segment: what it held.
    SegmentEnd(SegmentEnd) = 13,
}

/// The tag of event records.
pub(crate) const TAG_EVENT: u64 = 1;
