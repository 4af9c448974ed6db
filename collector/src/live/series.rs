//! Live bytes sampled over a run, in bounded memory: a shared grid of sample points (one per
//! step, or per time window) and, per counter, its values at those points.
//!
//! A grid keeps at most `cap` points. When it is full it drops every other point and from then
//! on keeps every second tick, so a run of any length is covered evenly by between `cap / 2` and
//! `cap` points. Counters are sampled lazily: a [`Series`] is only brought up to date when its
//! counter changes (or is read), filling the points that passed since with the value the counter
//! held all that time, so a tick costs nothing per counter.

/// Sample points shared by many series.
#[derive(Clone, Debug)]
pub(crate) struct Grid {
    cap: usize,
    /// Ticks between kept points.
    stride: u64,
    /// Ticks seen.
    ticks: u64,
    /// How many times the grid was halved.
    generation: u32,
    /// The x value (step number, or time) of each kept point.
    xs: Vec<u64>,
}

impl Grid {
    /// A grid of at most `cap` points (`cap` is rounded up to an even number, at least 2).
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(2).next_multiple_of(2);
        Grid {
            cap,
            stride: 1,
            ticks: 0,
            generation: 0,
            xs: Vec::new(),
        }
    }

    /// A sample point at `x`; every series takes its counter's value at this instant.
    pub(crate) fn tick(&mut self, x: u64) {
        let t = self.ticks;
        self.ticks += 1;
        if !t.is_multiple_of(self.stride) {
            return;
        }
        if self.xs.len() == self.cap {
            self.xs = self.xs.iter().copied().step_by(2).collect();
            self.stride *= 2;
            self.generation += 1;
            // `t` is `cap * old_stride`, a multiple of the new stride because `cap` is even.
        }
        self.xs.push(x);
    }

    /// The index of the next tick that will be kept (ticks before it would be dropped).
    pub(crate) fn next_kept_tick(&self) -> u64 {
        self.ticks.next_multiple_of(self.stride)
    }

    /// Skips to tick `k` (from [`Grid::next_kept_tick`]) and takes it at `x`.
    pub(crate) fn tick_at(&mut self, k: u64, x: u64) {
        self.ticks = self.ticks.max(k);
        self.tick(x);
    }

    /// Points kept.
    pub(crate) fn len(&self) -> usize {
        self.xs.len()
    }

    /// Ticks seen.
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Ticks between kept points.
    pub(crate) fn stride(&self) -> u64 {
        self.stride
    }

    /// The x value of each kept point.
    pub(crate) fn xs(&self) -> &[u64] {
        &self.xs
    }
}

/// One counter's values at the points of a [`Grid`], from the first point after it was born.
#[derive(Clone, Debug, Default)]
pub(crate) struct Series {
    /// Grid position of `values[0]`.
    start: u32,
    generation: u32,
    values: Vec<u64>,
}

impl Series {
    /// A series whose first point is the grid's next one.
    pub(crate) fn new(grid: &Grid) -> Self {
        Series {
            start: grid.len() as u32,
            generation: grid.generation,
            values: Vec::new(),
        }
    }

    /// Fills the points that passed since the last call with `held`, the value the counter held
    /// all that time. Call it before the counter changes, and before reading.
    #[inline]
    pub(crate) fn settle(&mut self, grid: &Grid, held: u64) {
        // Between two samples (nearly every call) there is nothing to do.
        if self.generation == grid.generation
            && self.start as usize + self.values.len() >= grid.len()
        {
            return;
        }
        self.catch_up(grid, held);
    }

    #[cold]
    fn catch_up(&mut self, grid: &Grid, held: u64) {
        while self.generation < grid.generation {
            // Keep the points at even grid positions, as the grid did.
            let start = self.start as usize;
            let skip = start % 2;
            self.values = self.values.iter().copied().skip(skip).step_by(2).collect();
            self.start = start.div_ceil(2) as u32;
            self.generation += 1;
        }
        let filled = self.start as usize + self.values.len();
        if filled < grid.len() {
            self.values
                .extend(std::iter::repeat_n(held, grid.len() - filled));
        }
    }

    /// `(x, value)` at each settled point.
    pub(crate) fn points<'a>(&'a self, grid: &'a Grid) -> impl Iterator<Item = (u64, u64)> + 'a {
        let xs = grid.xs().get(self.start as usize..).unwrap_or(&[]);
        xs.iter().copied().zip(self.values.iter().copied())
    }

    /// `(x, value)` at every point of the grid since the series began (`held` being the
    /// value the counter holds now), with a leading zero at the grid point before the series began
    /// (its counter held nothing then) when there is one.
    pub(crate) fn read_from_zero(&self, grid: &Grid, held: u64) -> Vec<(u64, u64)> {
        let mut s = self.clone();
        s.settle(grid, held);
        let before = (s.start as usize)
            .checked_sub(1)
            .and_then(|i| grid.xs().get(i))
            .map(|&x| (x, 0));
        before.into_iter().chain(s.points(grid)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_grid_keeps_every_other_point() {
        let mut g = Grid::new(4);
        for x in 0..9 {
            g.tick(x * 10);
        }
        // Ticks 0..8: after halving at tick 4 the stride is 2; at tick 8 it halves again.
        assert_eq!(g.xs(), &[0, 40, 80]);
        assert_eq!(g.stride(), 4);
    }

    #[test]
    fn series_fill_lazily_and_follow_halvings() {
        let mut g = Grid::new(4);
        let mut s = Series::new(&g);
        g.tick(0); // value 0 held
        s.settle(&g, 0);
        g.tick(1);
        g.tick(2); // value 5 held from here
        s.settle(&g, 0);
        g.tick(3);
        g.tick(4); // halves: kept ticks 0, 2, 4
        g.tick(5);
        g.tick(6);
        s.settle(&g, 5);
        let points: Vec<_> = s.points(&g).collect();
        assert_eq!(points, [(0, 0), (2, 0), (4, 5), (6, 5)]);
    }

    #[test]
    fn a_series_born_late_starts_at_its_birth() {
        let mut g = Grid::new(4);
        g.tick(0);
        g.tick(1);
        g.tick(2);
        let mut s = Series::new(&g);
        g.tick(3);
        g.tick(4);
        g.tick(5);
        g.tick(6);
        s.settle(&g, 7);
        // Born after tick 2: tick 3 is dropped by the halving, so the series starts at tick 4.
        let points: Vec<_> = s.points(&g).collect();
        assert_eq!(points, [(4, 7), (6, 7)]);
    }
}
