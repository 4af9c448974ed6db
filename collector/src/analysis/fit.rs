//! Least-squares lines through sampled live bytes, computed exactly.
//!
//! Samples are integers (step numbers or window indices, and bytes), so the sums are kept as
//! 128-bit integers, relative to the first sample: the slope of a planted growth of exactly
//! 1 MiB per step comes out as exactly 1048576.0, and a constant series has a slope of exactly 0.
//! Only the final divisions are floating point. Sums too large for 128 bits (a series of more
//! than a few thousand points of petabytes) fall back to floating point.

use serde::Serialize;

/// A least-squares line `bytes = intercept + slope * x`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Fit {
    /// Points fitted.
    pub samples: usize,
    /// Bytes per unit of x (per step, or per time window).
    pub slope: f64,
    /// Bytes at x = 0.
    pub intercept: f64,
    /// Coefficient of determination: 1 when the points lie on the line, near 0 when the line
    /// explains nothing. A constant series fits perfectly (1).
    pub r2: f64,
}

impl Fit {
    /// The line through `points`; `None` for fewer than two points or a single x.
    pub fn of(points: &[(u64, u64)]) -> Option<Fit> {
        let &(x0, y0) = points.first()?;
        if points.len() < 2 {
            return None;
        }
        exact(points, x0, y0).or_else(|| approximate(points))
    }
}

fn exact(points: &[(u64, u64)], x0: u64, y0: u64) -> Option<Fit> {
    let n = points.len() as i128;
    let (mut sx, mut sy, mut sxx, mut sxy, mut syy) = (0i128, 0i128, 0i128, 0i128, 0i128);
    for &(x, y) in points {
        let x = i128::from(x) - i128::from(x0);
        let y = i128::from(y) - i128::from(y0);
        sx = sx.checked_add(x)?;
        sy = sy.checked_add(y)?;
        sxx = sxx.checked_add(x.checked_mul(x)?)?;
        sxy = sxy.checked_add(x.checked_mul(y)?)?;
        syy = syy.checked_add(y.checked_mul(y)?)?;
    }
    let dxx = n.checked_mul(sxx)?.checked_sub(sx.checked_mul(sx)?)?;
    let dxy = n.checked_mul(sxy)?.checked_sub(sx.checked_mul(sy)?)?;
    let dyy = n.checked_mul(syy)?.checked_sub(sy.checked_mul(sy)?)?;
    if dxx == 0 {
        return None;
    }
    let slope = dxy as f64 / dxx as f64;
    // Intercept at x = 0 of the original axis: y0 + (sy - slope * sx) / n - slope * x0.
    let intercept = y0 as f64 + (sy as f64 - slope * sx as f64) / n as f64 - slope * x0 as f64;
    let r2 = if dyy == 0 {
        1.0
    } else {
        let (dxy, dxx, dyy) = (dxy as f64, dxx as f64, dyy as f64);
        (dxy / dxx) * (dxy / dyy)
    };
    Some(Fit {
        samples: points.len(),
        slope,
        intercept,
        r2,
    })
}

fn approximate(points: &[(u64, u64)]) -> Option<Fit> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in points {
        let (dx, dy) = (x as f64 - mx, y as f64 - my);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        sxy * sxy / (sxx * syy)
    };
    Some(Fit {
        samples: points.len(),
        slope,
        intercept: my - slope * mx,
        r2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_line_fits_exactly() {
        let points: Vec<(u64, u64)> = (0..20).map(|s| (s, (7 << 30) + s * 1_048_576)).collect();
        let f = Fit::of(&points).unwrap();
        assert_eq!(f.slope, 1_048_576.0);
        assert_eq!(f.intercept, (7u64 << 30) as f64);
        assert_eq!(f.r2, 1.0);
    }

    #[test]
    fn constant_and_degenerate_series() {
        let f = Fit::of(&[(0, 5), (1, 5), (2, 5)]).unwrap();
        assert_eq!((f.slope, f.r2), (0.0, 1.0));
        assert!(Fit::of(&[(3, 5)]).is_none());
        assert!(Fit::of(&[(3, 5), (3, 9)]).is_none());
    }

    #[test]
    fn a_single_spike_fits_badly() {
        let points = [(0, 0), (1, 0), (2, 100), (3, 0), (4, 0)];
        let f = Fit::of(&points).unwrap();
        assert_eq!(f.slope, 0.0);
        assert_eq!(f.r2, 0.0);
    }

    #[test]
    fn huge_values_fall_back_to_floating_point() {
        let points: Vec<(u64, u64)> = (0..4).map(|s| (s << 60, u64::MAX - s)).collect();
        let f = Fit::of(&points).unwrap();
        assert!(f.slope < 0.0 && f.r2 > 0.99);
    }
}
