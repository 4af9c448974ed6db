//! The things that can be live, each with the [`Origin`] of the call that made it, plus the
//! [`Category`] and [`Flag`] vocabulary the queries answer in.
//!
//! Addresses, handles and communicator ids serialize as `"0x…"` strings: they are 64-bit values
//! that JSON consumers (JavaScript in particular) cannot hold exactly as numbers.

use std::borrow::Cow;

use serde::{Serialize, Serializer};

use crate::ids::{CallId, SiteId};

use crate::event::{Api, MemKind, StackId};

/// Serializes an [`Api`] as its exported symbol name (`cuMemAlloc_v2`).
pub(crate) fn api_name<S: Serializer>(api: &Api, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(api.name())
}

/// Serializes a 64-bit address or handle as `0x…`.
pub(crate) fn hex<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// Serializes an optional address or handle as `0x…` or `null`.
pub(crate) fn hex_opt<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&format!("{v:#x}")),
        None => s.serialize_none(),
    }
}

/// Where and when a live object was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// Sequence number of the creating event.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the creating call returned.
    pub time_ns: u64,
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    pub thread: u32,
    /// Return address of the creating call.
    #[serde(serialize_with = "hex")]
    pub caller: u64,
    /// Interned native stack, 0 when none was captured.
    pub stack: StackId,
    /// Interned Python stack, 0 when none was captured.
    pub py_stack: StackId,
    /// Device current at the call (-1 when unknown).
    pub device: i32,
    /// Context current at the call (0 when unknown).
    #[serde(serialize_with = "hex")]
    pub context: u64,
    /// The module that asked: the first module outside the CUDA libraries.
    pub module: Option<u32>,
    /// The NCCL communicator the object belongs to, once known.
    #[serde(serialize_with = "hex_opt")]
    pub communicator: Option<u64>,
    /// How many steps had begun when the object was made (step marks, or occurrences of the
    /// step allocation; see `LiveState::steps`).
    pub step: u64,
    /// The call site node of this trace's replay (its stack, else its caller).
    #[serde(skip)]
    pub site: SiteId,
    /// The memory pool an async allocation came from (0: the device's default pool, and for
    /// every other kind of object).
    #[serde(skip)]
    pub pool: u64,
}

/// Something about a live object a user should know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flag {
    /// Its communicator was destroyed or aborted, but the object is still live.
    CommunicatorGone,
    /// Its memory pool was destroyed, but the allocation is still live.
    PoolDestroyed,
    /// A mapping whose reservation was freed while it was still mapped.
    ReservationGone,
    /// The context it was made in was destroyed (physical handles, reservations and mappings
    /// outlive their context).
    ContextGone,
    /// A registration or window whose buffer is no longer live.
    BufferGone,
    /// A physical handle with references but no mapping using it.
    Unmapped,
    /// A physical handle whose references were all released; a mapping keeps it alive.
    Released,
    /// A physical handle imported from another process.
    Imported,
    /// A physical handle first seen in a map or retain: its creation was not traced.
    Unseen,
}

impl Flag {
    /// Every flag, in bit order.
    pub const ALL: [Flag; 9] = [
        Flag::CommunicatorGone,
        Flag::PoolDestroyed,
        Flag::ReservationGone,
        Flag::ContextGone,
        Flag::BufferGone,
        Flag::Unmapped,
        Flag::Released,
        Flag::Imported,
        Flag::Unseen,
    ];

    /// Short name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Flag::CommunicatorGone => "communicator-gone",
            Flag::PoolDestroyed => "pool-destroyed",
            Flag::ReservationGone => "reservation-gone",
            Flag::ContextGone => "context-gone",
            Flag::BufferGone => "buffer-gone",
            Flag::Unmapped => "unmapped",
            Flag::Released => "released",
            Flag::Imported => "imported",
            Flag::Unseen => "unseen",
        }
    }

    /// Whether the flag makes the object an orphan: live, but what owned it is gone.
    pub(crate) const fn is_orphan(self) -> bool {
        matches!(
            self,
            Flag::CommunicatorGone
                | Flag::PoolDestroyed
                | Flag::ReservationGone
                | Flag::ContextGone
                | Flag::BufferGone
                | Flag::Unmapped
        )
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// A set of [`Flag`]s; serializes as a list of flag names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    /// Whether `flag` is set.
    pub fn contains(self, flag: Flag) -> bool {
        self.0 & flag.bit() != 0
    }

    /// Sets `flag`.
    pub fn insert(&mut self, flag: Flag) {
        self.0 |= flag.bit();
    }

    /// This set with `flag` added.
    pub fn with(mut self, flag: Flag) -> Self {
        self.insert(flag);
        self
    }

    /// The flags as bits: bit i is the i-th of [`Flag::ALL`] (a snapshot's wire form).
    pub(crate) fn bits(self) -> u16 {
        self.0
    }

    /// The flags of `bits` (see [`Flags::bits`]); bits this version does not know are dropped.
    pub(crate) fn from_bits(bits: u16) -> Self {
        Flags(bits & Flag::ALL.iter().fold(0, |m, f| m | f.bit()))
    }

    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether any orphan flag is set.
    pub(crate) fn is_orphan(self) -> bool {
        self.iter().any(Flag::is_orphan)
    }

    /// The flags set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Flag> {
        Flag::ALL.into_iter().filter(move |f| self.contains(*f))
    }
}

impl Serialize for Flags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// What kind of thing a live object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    Device,
    Async,
    Managed,
    Pitched,
    Array,
    /// A physical allocation handle (`cuMemCreate`, or imported).
    Physical,
    HostPinned,
    HostRegistered,
    /// Another process's memory opened through IPC (its size is not known here).
    Ipc,
    /// Reserved virtual address space; not memory.
    ReservationVa,
    /// A virtual range mapped onto a physical handle; the handle holds the bytes.
    Mapping,
    /// An `ncclMemAlloc` buffer: a label over physical handles traced separately.
    NcclBufferLabel,
    /// A buffer registered with a communicator.
    Registration,
    /// A symmetric window registered with a communicator.
    Window,
}

/// How a category's bytes count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accounting {
    /// Device memory in use.
    Device,
    /// Page-locked host memory.
    Host,
    /// Virtual address space only.
    VirtualAddress,
    /// A view of bytes counted elsewhere (mappings, labels, registrations, windows).
    None,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 14] = [
        Category::Device,
        Category::Async,
        Category::Managed,
        Category::Pitched,
        Category::Array,
        Category::Physical,
        Category::HostPinned,
        Category::HostRegistered,
        Category::Ipc,
        Category::ReservationVa,
        Category::Mapping,
        Category::NcclBufferLabel,
        Category::Registration,
        Category::Window,
    ];

    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            Category::Device => "device",
            Category::Async => "async",
            Category::Managed => "managed",
            Category::Pitched => "pitched",
            Category::Array => "array",
            Category::Physical => "physical",
            Category::HostPinned => "host-pinned",
            Category::HostRegistered => "host-registered",
            Category::Ipc => "ipc",
            Category::ReservationVa => "reservation-va",
            Category::Mapping => "mapping",
            Category::NcclBufferLabel => "nccl-buffer-label",
            Category::Registration => "registration",
            Category::Window => "window",
        }
    }

    /// How the category's bytes count.
    pub const fn accounting(self) -> Accounting {
        match self {
            Category::Device
            | Category::Async
            | Category::Managed
            | Category::Pitched
            | Category::Array
            | Category::Physical
            | Category::Ipc => Accounting::Device,
            Category::HostPinned | Category::HostRegistered => Accounting::Host,
            Category::ReservationVa => Accounting::VirtualAddress,
            Category::Mapping
            | Category::NcclBufferLabel
            | Category::Registration
            | Category::Window => Accounting::None,
        }
    }

    /// The category of a pointer allocation.
    pub const fn of_kind(kind: MemKind) -> Category {
        match kind {
            MemKind::Device => Category::Device,
            MemKind::Async => Category::Async,
            MemKind::Managed => Category::Managed,
            MemKind::Pitched => Category::Pitched,
            MemKind::HostPinned => Category::HostPinned,
            MemKind::Array => Category::Array,
        }
    }
}

/// A pointer allocation: device, async, managed, pitched or pinned host memory.
///
/// A live set holds millions of these, so one keeps only what is its own (48 bytes); the rest of
/// its [`Origin`], and the pool it came from, are its interned call's (see `sites`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub ptr: u64,
    pub size: u64,
    /// Sequence number of the allocating event.
    pub seq: u64,
    /// When the allocating call returned.
    pub time_ns: u64,
    /// Steps begun before it was made.
    pub step: u64,
    pub(crate) call: CallId,
    pub flags: Flags,
    pub kind: MemKind,
}

/// Host memory page-locked in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostRegistration {
    pub ptr: u64,
    pub size: u64,
    pub register_flags: u32,
    pub flags: Flags,
    pub origin: Origin,
}

/// A CUDA array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Array {
    pub array: u64,
    pub bytes: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// Another process's memory opened through IPC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IpcMapping {
    pub ptr: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// A virtual address range reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub ptr: u64,
    pub size: u64,
    pub alignment: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// A physical allocation handle. Its bytes are live while it has references or mappings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PhysicalHandle {
    pub handle: u64,
    /// Bytes (0 for an imported or unseen handle whose size is not known).
    pub size: u64,
    /// Device the memory is on.
    pub device: i32,
    /// References held by the program (`cuMemCreate`, `cuMemRetainAllocationHandle`, import).
    pub refs: u32,
    /// Mappings using it.
    pub mappings: u32,
    pub flags: Flags,
    pub origin: Origin,
}

impl PhysicalHandle {
    /// Whether its bytes count as live: a handle the program created does; an imported one,
    /// or a placeholder for one whose creation was not seen, never was counted.
    pub(crate) fn charged(&self) -> bool {
        !self.flags.contains(Flag::Imported) && !self.flags.contains(Flag::Unseen)
    }
}

/// A virtual range mapped onto part of a physical handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub ptr: u64,
    pub size: u64,
    pub offset: u64,
    pub handle: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// A memory pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pool {
    #[serde(serialize_with = "hex")]
    pub pool: u64,
    pub device: i32,
    /// How many times it was trimmed.
    pub trims: u64,
    pub origin: Origin,
}

/// A context created with `cuCtxCreate*` (primary contexts are not tracked as objects).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Context {
    #[serde(serialize_with = "hex")]
    pub ctx: u64,
    pub device: i32,
    pub origin: Origin,
}

/// Where a communicator is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommState {
    Live,
    Finalized,
    Destroyed,
    Aborted,
}

impl CommState {
    /// Short name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            CommState::Live => "live",
            CommState::Finalized => "finalized",
            CommState::Destroyed => "destroyed",
            CommState::Aborted => "aborted",
        }
    }

    /// Whether the communicator no longer exists.
    pub(crate) const fn is_gone(self) -> bool {
        matches!(self, CommState::Destroyed | CommState::Aborted)
    }
}

/// An NCCL communicator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Communicator {
    #[serde(serialize_with = "hex")]
    pub comm: u64,
    pub rank: i32,
    pub nranks: i32,
    pub device: i32,
    /// The communicator it was split from, else 0.
    #[serde(serialize_with = "hex")]
    pub parent: u64,
    pub state: CommState,
    /// Sequence number of the destroy or abort.
    pub ended_seq: Option<u64>,
    pub origin: Origin,
}

/// An `ncclMemAlloc` buffer: names memory whose physical handles are separate objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NcclBuffer {
    pub ptr: u64,
    pub size: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// A buffer registered with a communicator (`ncclCommRegister`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub comm: u64,
    pub ptr: u64,
    pub size: u64,
    pub handle: u64,
    pub flags: Flags,
    pub origin: Origin,
}

/// A symmetric window registered with a communicator (`ncclCommWindowRegister`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub comm: u64,
    pub ptr: u64,
    pub size: u64,
    pub window: u64,
    pub window_flags: i32,
    pub flags: Flags,
    pub origin: Origin,
}

/// One live object, as the queries report it.
#[derive(Clone, Debug, Serialize)]
pub struct LiveObject<'a> {
    pub category: Category,
    /// Pointer, or the handle / array / registration / window value.
    #[serde(serialize_with = "hex")]
    pub address: u64,
    /// Bytes; how they count depends on the category ([`Category::accounting`]).
    pub bytes: u64,
    /// Device the bytes are on (-1 when unknown).
    pub device: i32,
    /// For a mapping: the physical handle it maps.
    #[serde(serialize_with = "hex_opt", skip_serializing_if = "Option::is_none")]
    pub handle: Option<u64>,
    /// For a physical handle: references the program holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refs: Option<u32>,
    /// For a physical handle: mappings using it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mappings: Option<u32>,
    pub flags: Flags,
    /// Borrowed from objects that keep their whole origin, put back together from the interned
    /// call for pointer allocations (which keep only what is their own).
    pub origin: Cow<'a, Origin>,
}

impl LiveObject<'_> {
    /// Bytes this object adds to device memory in use.
    pub fn device_bytes(&self) -> u64 {
        match self.category.accounting() {
            Accounting::Device => self.bytes,
            _ => 0,
        }
    }

    /// Bytes this object adds to pinned host memory.
    pub fn host_bytes(&self) -> u64 {
        match self.category.accounting() {
            Accounting::Host => self.bytes,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_serialize_as_names() {
        let f = Flags::default()
            .with(Flag::CommunicatorGone)
            .with(Flag::Unmapped);
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            r#"["communicator-gone","unmapped"]"#
        );
        assert!(f.is_orphan());
        assert!(!Flags::default().with(Flag::Released).is_orphan());
    }

    #[test]
    fn category_names_match_their_json() {
        for c in Category::ALL {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
        for f in Flag::ALL {
            assert_eq!(
                serde_json::to_string(&f).unwrap(),
                format!("\"{}\"", f.name())
            );
        }
    }
}
