//! One finding per cause. The views of memory each see one leak in their own way: PyTorch's
//! recorder sees the tensors kept, at the line that allocated them; the driver sees the segments
//! the caching allocator asks for to hold them, at whichever line happened to need a new one;
//! an NCCL communicator holds device buffers and host memory beside them. Every row of steady
//! growth ([`Growth::steady`](super::Growth)) is either a cause or evidence of one, so that a
//! report says each cause once, at the line that keeps its memory, with the other views as its
//! evidence:
//!
//! - a row of a framework's own view of its arrays (PyTorch's tensors) is a cause: it names the
//!   line whose allocations stay live;
//! - a driver row of that framework's allocator on the same device is the allocator reserving
//!   memory for those arrays: evidence of the cause at the same line, else of the cause whose
//!   rate is nearest (a segment requested at line 41 for tensors kept at line 42);
//! - a driver row at the same line, of the same kind of owner, as a cause already found is the
//!   same cause seen through another native path;
//! - a native program's NCCL device buffers growing at several of its calls on one device (the
//!   call that creates each communicator, the first collective that sets up its buffers) are
//!   the communicators never destroyed: one cause, at the fastest place, their rates together
//!   (a Python program's are at the line that makes its process group: two lines, two groups);
//! - a host row at the line of a device cause, or NCCL's host memory beside a cause of NCCL's
//!   device buffers, mirrors it;
//! - any other row is a cause of its own.

use super::growth::{Role, SiteGrowth, DRIVER};
use super::owner::OwnerKind;
use crate::live::Holder;

/// One cause: the row that names it and the rows that are its evidence, as indices into the
/// rows grouped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub primary: usize,
    pub related: Vec<(usize, Role)>,
}

impl Cause {
    /// Every row of the cause, the primary first.
    pub fn rows(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.primary).chain(self.related.iter().map(|r| r.0))
    }
}

/// Whether two rows are of the same program line.
fn same_line(a: &SiteGrowth, b: &SiteGrowth) -> bool {
    match (&a.site.source, &b.site.source) {
        (Some(x), Some(y)) => x.same_line(y),
        _ => false,
    }
}

/// The rows of steady growth grouped into causes, in the order of their primary rows.
pub fn group(steady: &[SiteGrowth]) -> Vec<Cause> {
    let mut causes: Vec<Cause> = Vec::new();
    let is_device = |s: &SiteGrowth| matches!(s.holder, Holder::Device { .. });
    // The framework's own views first: each row names a line whose arrays stay live.
    for (i, s) in steady.iter().enumerate() {
        if s.view != DRIVER {
            causes.push(Cause {
                primary: i,
                related: Vec::new(),
            });
        }
    }
    let views = causes.len();
    let driver = |s: &&SiteGrowth| s.view == DRIVER;
    for (i, s) in steady
        .iter()
        .enumerate()
        .filter(|(_, s)| driver(s) && is_device(s))
    {
        let of_view = |c: &&Cause| {
            let p = &steady[c.primary];
            p.holder == s.holder && p.site.owner == s.site.owner
        };
        let viewed: Vec<usize> = (0..views).filter(|&k| of_view(&&causes[k])).collect();
        let target = if s.site.owner.is_framework() && !viewed.is_empty() {
            let at_line = viewed
                .iter()
                .copied()
                .find(|&k| same_line(&steady[causes[k].primary], s));
            let nearest = || {
                viewed.iter().copied().min_by(|&a, &b| {
                    let gap = |k: usize| {
                        let r = steady[causes[k].primary].course.rate.max(1.0);
                        (s.course.rate.max(1.0) / r).ln().abs()
                    };
                    gap(a).total_cmp(&gap(b))
                })
            };
            at_line.or_else(nearest).map(|k| (k, Role::Segments))
        } else {
            let of_driver = |c: &Cause| {
                let p = &steady[c.primary];
                p.view == DRIVER && p.holder == s.holder && p.site.owner == s.site.owner
            };
            // A native program's NCCL rows (no Python line) at several of its calls: its
            // communicators' creation and their first collective. A Python program's NCCL rows
            // at two lines stay two causes: two process groups, each made at its line.
            let native_nccl =
                |x: &SiteGrowth| x.site.owner == OwnerKind::Nccl && x.site.source.is_none();
            (causes.iter())
                .position(|c| of_driver(c) && same_line(&steady[c.primary], s))
                .map(|k| (k, Role::SameLine))
                .or_else(|| {
                    (causes.iter())
                        .position(|c| of_driver(c) && native_nccl(&steady[c.primary]))
                        .filter(|_| native_nccl(s))
                        .map(|k| (k, Role::Communicators))
                })
        };
        match target {
            Some((k, role)) => causes[k].related.push((i, role)),
            None => causes.push(Cause {
                primary: i,
                related: Vec::new(),
            }),
        }
    }
    for (i, s) in steady.iter().enumerate().filter(|(_, s)| !is_device(s)) {
        let mirrors = |c: &Cause| {
            c.rows().any(|r| {
                let d = &steady[r];
                let nccl = |x: &SiteGrowth| x.site.owner == OwnerKind::Nccl;
                is_device(d) && (same_line(d, s) || (nccl(d) && nccl(s)))
            })
        };
        match causes.iter().position(mirrors) {
            Some(k) => causes[k].related.push((i, Role::Host)),
            None => causes.push(Cause {
                primary: i,
                related: Vec::new(),
            }),
        }
    }
    causes
}
