//! How a plot's axis reads: log when the values drawn on it span more than ten times (a
//! linear axis then squeezes the smaller series flat onto zero under the larger, as Warren's
//! flight times under RabbitMQ's seconds-long ones), linear otherwise; and tick labels that
//! print counts as whole numbers ("1100", "16k", "1M", never "1100.0") and measurements with
//! no more digits than they carry. One rule for every scenario's plots.

/// The span (largest over smallest) above which an axis is drawn on a log scale.
pub const LOG_SPAN: f64 = 10.0;

/// One axis of a plot, decided from the values drawn on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    pub log: bool,
    /// Every value is a whole number (counts: queues, senders, msg/s steps): ticks between
    /// whole numbers get no label.
    pub whole: bool,
    /// The drawn range, with a margin so points at the ends are not on the frame.
    pub low: f64,
    pub high: f64,
}

impl Axis {
    /// The axis for `values`; `from_zero` starts a linear axis at 0 (the y axis: a bar of
    /// latency read against zero), else at the smallest value (the x axis: the swept steps).
    /// None when there is nothing finite to draw.
    pub fn for_values(values: &[f64], from_zero: bool) -> Option<Axis> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let min = finite.iter().copied().reduce(f64::min)?;
        let max = finite.iter().copied().fold(min, f64::max);
        let whole = finite.iter().all(|v| v.fract() == 0.0);
        if wants_log(&finite) {
            return Some(Axis {
                log: true,
                whole,
                low: min / 1.25,
                high: max * 1.25,
            });
        }
        let (low, high) = if from_zero {
            (min.min(0.0), (max * 1.1).max(1e-3))
        } else if max > min {
            (min, max)
        } else {
            (min - 1.0, max + 1.0)
        };
        Some(Axis {
            log: false,
            whole,
            low,
            high,
        })
    }

    /// The label of a tick at `v` on this axis ("" for a tick between whole numbers on an
    /// axis of whole numbers).
    pub fn tick_label(&self, v: f64) -> String {
        if self.whole && (v - v.round()).abs() > 1e-9 * v.abs().max(1.0) {
            return String::new();
        }
        tick_label(v)
    }
}

/// Log scale when every value is positive (a log axis cannot draw zero) and the largest is
/// more than `LOG_SPAN` times the smallest.
pub fn wants_log(values: &[f64]) -> bool {
    let Some(min) = values.iter().copied().reduce(f64::min) else {
        return false;
    };
    let max = values.iter().copied().fold(min, f64::max);
    min > 0.0 && max / min > LOG_SPAN
}

/// A tick value as people write it: "1100", "16k", "2.5M", "0.25", "0.0012" (three
/// significant digits at most, trailing zeros dropped).
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trimmed(v / 1e6, 1))
    } else if a >= 1e4 {
        format!("{}k", trimmed(v / 1e3, 1))
    } else if a == 0.0 {
        "0".to_owned()
    } else {
        // Digits after the point for three significant ones, none for 100 and up.
        let decimals = (2 - a.log10().floor() as i32).clamp(0, 9) as usize;
        trimmed(v, decimals)
    }
}

fn trimmed(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_only_past_ten_times_and_never_with_zero() {
        // many-pairs' flight times: Warren 3 ms beside RabbitMQ's 922 ms.
        assert!(wants_log(&[3.02, 10.72, 474.0, 922.0]));
        // N from 1,000 to 10,000 is ten times exactly: linear.
        assert!(!wants_log(&[1000.0, 5000.0, 10000.0]));
        assert!(wants_log(&[1000.0, 4000.0, 16000.0]));
        // A zero (no losses) cannot go on a log axis, whatever the span.
        assert!(!wants_log(&[0.0, 1.0, 1000.0]));
        assert!(!wants_log(&[-5.0, 100.0]));
        assert!(!wants_log(&[]));
        assert!(!wants_log(&[7.0]));
    }

    #[test]
    fn axis_ranges() {
        let y = Axis::for_values(&[3.02, 922.0], true).unwrap();
        assert!(y.log && !y.whole);
        assert!(y.low < 3.02 && y.low > 0.0 && y.high > 922.0);
        let y = Axis::for_values(&[2.0, 4.0], true).unwrap();
        assert!(!y.log);
        assert_eq!((y.low, y.high), (0.0, 4.4));
        let x = Axis::for_values(&[1000.0, 2000.0], false).unwrap();
        assert!(!x.log && x.whole);
        assert_eq!((x.low, x.high), (1000.0, 2000.0));
        // One step: a range around it.
        let x = Axis::for_values(&[16.0], false).unwrap();
        assert_eq!((x.low, x.high), (15.0, 17.0));
        assert_eq!(Axis::for_values(&[f64::NAN], false), None);
    }

    #[test]
    fn tick_labels() {
        // The x ticks many-pairs' plot printed as "1100.0".
        assert_eq!(tick_label(1100.0), "1100");
        assert_eq!(tick_label(1000.0), "1000");
        assert_eq!(tick_label(16000.0), "16k");
        assert_eq!(tick_label(12500.0), "12.5k");
        assert_eq!(tick_label(1_000_000.0), "1M");
        assert_eq!(tick_label(2_500_000.0), "2.5M");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(0.0012), "0.0012");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.1 + 0.2), "0.3");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(-0.0001), "-0.0001");
        // Counts: no label between whole numbers.
        let counts = Axis::for_values(&[1.0, 2.0, 3.0], false).unwrap();
        assert_eq!(counts.tick_label(1.5), "");
        assert_eq!(counts.tick_label(2.0), "2");
        let ms = Axis::for_values(&[0.5, 1.5], true).unwrap();
        assert_eq!(ms.tick_label(1.25), "1.25");
    }
}
