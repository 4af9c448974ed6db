//! Reading postcard's primitives: the [`Wire`] trait both fast readers implement, and the packing
//! of a varint's 7-bit groups.

use crate::event::{Api, CommEnd, MemKind};

/// Reads postcard values in order. Every method returns `None` where the reader gives up: on
/// bytes postcard rejects, and on bytes it accepts that this reader was not written for.
pub(super) trait Wire {
    /// A varint of at most `max_bytes` bytes whose last byte is at most `last_max` (postcard's
    /// limits for the type: anything longer or wider is an error there).
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Option<u64>;

    /// One raw byte (a `bool`, or the tag of an `Option`).
    fn byte(&mut self) -> Option<u8>;

    /// A string. The fast readers leave strings and lists to the general reader: they give up.
    fn string(&mut self) -> Option<String> {
        None
    }

    fn u64s(&mut self) -> Option<Vec<u64>> {
        None
    }

    fn i32s(&mut self) -> Option<Vec<i32>> {
        None
    }

    /// Whether what was read lies inside the payload: a reader that may read past it while
    /// reading (and so must be asked before anything it read is used) says no.
    #[inline(always)]
    fn within_payload(&self) -> bool {
        true
    }

    #[inline(always)]
    fn u64(&mut self) -> Option<u64> {
        self.varint(10, 0x01)
    }

    /// A pointer field: a plain `u64` in postcard's layout (version 2 codes it against the
    /// previous pointer of the chunk, see `compact`).
    #[inline(always)]
    fn ptr(&mut self) -> Option<u64> {
        self.u64()
    }

    #[inline(always)]
    fn u32(&mut self) -> Option<u32> {
        self.varint(5, 0x0f).map(|v| v as u32)
    }

    /// Zigzag: 0, -1, 1, -2, ... are 0, 1, 2, 3, ...
    #[inline(always)]
    fn i32(&mut self) -> Option<i32> {
        let n = self.u32()?;
        Some(((n >> 1) as i32) ^ -((n & 1) as i32))
    }

    #[inline(always)]
    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    #[inline(always)]
    fn api(&mut self) -> Option<Api> {
        Api::ALL.get(self.u32()? as usize).copied()
    }

    #[inline(always)]
    fn option_api(&mut self) -> Option<Option<Api>> {
        match self.byte()? {
            0 => Some(None),
            1 => Some(Some(self.api()?)),
            _ => None,
        }
    }

    #[inline(always)]
    fn kind(&mut self) -> Option<MemKind> {
        mem_kind(self.u32()?)
    }

    fn how(&mut self) -> Option<CommEnd> {
        Some(match self.u32()? {
            0 => CommEnd::Destroy,
            1 => CommEnd::Abort,
            2 => CommEnd::Finalize,
            _ => return None,
        })
    }
}

/// The memory kind of a variant index; `None` for one this reader does not know.
#[inline(always)]
pub(super) fn mem_kind(index: u32) -> Option<MemKind> {
    Some(match index {
        0 => MemKind::Device,
        1 => MemKind::Async,
        2 => MemKind::Managed,
        3 => MemKind::Pitched,
        4 => MemKind::HostPinned,
        5 => MemKind::Array,
        _ => return None,
    })
}

/// The value of a varint whose `len` bytes (1 to 8) start `word`: their 7-bit groups packed
/// together, pairs, then quads, then the two halves, without a loop.
#[inline(always)]
pub(super) fn pack(word: u64, len: u32) -> u64 {
    let x = (word & (u64::MAX >> (64 - 8 * len))) & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// [`pack`] with BMI2's `pext`, which gathers the 7-bit groups in one instruction.
///
/// Only for code compiled with BMI2 enabled (see [`packs_with_pext`]): elsewhere the intrinsic
/// is not inlined, or not there at all.
#[inline(always)]
pub(super) fn pack_pext(word: u64, len: u32) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = word & (u64::MAX >> (64 - 8 * len));
        // SAFETY: `pext` is an instruction of BMI2; this runs only inside functions compiled for
        // BMI2, which are called only once `packs_with_pext` found it on this CPU.
        unsafe { std::arch::x86_64::_pext_u64(bytes, 0x7f7f_7f7f_7f7f_7f7f) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    pack(word, len)
}

/// Whether this CPU has BMI2's `pext`, and it is fast: AMD processors before Zen 3 (family 0x19)
/// run it in microcode, some hundred cycles, far slower than [`pack`]. Found out once; after
/// that a load, on every event.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn packs_with_pext() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    /// 0: not yet known; 1: no; 2: yes.
    static FAST: AtomicU8 = AtomicU8::new(0);
    match FAST.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let fast = pext_is_fast();
            FAST.store(1 + u8::from(fast), Ordering::Relaxed);
            fast
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[cold]
fn pext_is_fast() -> bool {
    if !std::arch::is_x86_feature_detected!("bmi2") {
        return false;
    }
    // Leaf 0: the vendor in EBX, EDX, ECX ("AuthenticAMD"); leaf 1: the family in EAX.
    // SAFETY: every x86-64 processor has cpuid. The intrinsic is an `unsafe fn` up to Rust 1.89
    // at least (the declared rust-version is older) and safe in later ones, hence the allow.
    #[allow(unused_unsafe)]
    let (vendor, eax) = unsafe {
        use std::arch::x86_64::__cpuid;
        (__cpuid(0), __cpuid(1).eax)
    };
    let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
    let base = (eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    };
    !amd || family >= 0x19
}

/// Whether a varint of `len` bytes whose last byte is `last` is within postcard's limits.
#[inline(always)]
pub(super) fn within(len: u32, last: u8, max_bytes: u32, last_max: u8) -> bool {
    len < max_bytes || (len == max_bytes && last <= last_max)
}

/// [`pack_pext`] with `PEXT` (only inside functions compiled for BMI2), else [`pack`].
#[inline(always)]
pub(super) fn pack_with<const PEXT: bool>(word: u64, len: u32) -> u64 {
    if PEXT {
        pack_pext(word, len)
    } else {
        pack(word, len)
    }
}
