//! Value parsers shared by subcommands' options.

/// `--cell-kb`, `--point-cell-kb` (also `ballast run`'s): a finite KB count, 0 or more.
pub fn non_negative_kb(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a memory size: give KB per cell, finite and 0 or more"
        ))
    }
}

/// The largest `dry-run --rank-overhead-mb`, MiB (1 PiB per rank: more than any node has).
pub const MAX_RANK_OVERHEAD_MB: f64 = (1u64 << 30) as f64;

/// `dry-run --rank-overhead-mb`: a finite MiB count, 0 or more, at most
/// [`MAX_RANK_OVERHEAD_MB`].
pub fn non_negative_mb(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && (0.0..=MAX_RANK_OVERHEAD_MB).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a memory size: give MiB per rank, finite, 0 or more and at most {MAX_RANK_OVERHEAD_MB:.0} (1 PiB)"
        ))
    }
}

/// The largest `run --delay-ms`, ms (1000 s): above any synaptic delay (NEURON circuits'
/// are a few ms), and small enough that delays in steps of any `--dt` stay countable.
pub const MAX_DELAY_MS: f64 = 1e6;

/// `run --delay-ms`: a finite delay above 0, at most [`MAX_DELAY_MS`].
pub fn delay_ms(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x > 0.0 && x <= MAX_DELAY_MS {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a synaptic delay: give ms, finite, above 0 and at most {MAX_DELAY_MS:.0}"
        ))
    }
}

/// The largest `--memory-scale` (run, demo): a cell's estimated memory times this many is
/// allocated; more than this is no longer a scale of the estimate.
pub const MAX_MEMORY_SCALE: f64 = 1e6;

/// `--memory-scale` (run, demo): finite, 0 or more, at most [`MAX_MEMORY_SCALE`].
pub fn memory_scale(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && (0.0..=MAX_MEMORY_SCALE).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "{s} is out of range: give a finite scale, 0 or more and at most {MAX_MEMORY_SCALE:.0}"
        ))
    }
}

/// `--tstop` (run, demo): a finite time, ms, 0 or more.
pub fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Ok(_) => Err(format!("{s} is out of range: give a finite number, 0 or more")),
        Err(e) => Err(e.to_string()),
    }
}

/// A whole number from `min` to `max`, of type `T`: the value parser of the ranged count
/// options (`--ranks`, `--num-target-ranks`, `--cycles`, `--messages`, ...). Its errors name
/// the option and say the bound in words, e.g. `--num-target-ranks must be at least 1 (got
/// 0)`, where clap's ranged parsers said `0 is not in 1..=4294967295`.
#[derive(Clone, Copy)]
pub struct Whole<T> {
    min: u64,
    max: u64,
    ty: std::marker::PhantomData<fn() -> T>,
}

/// [`Whole`] from `min` to `max` (`max` at most the largest `T`).
pub fn whole<T>(min: u64, max: u64) -> Whole<T> {
    Whole {
        min,
        max,
        ty: std::marker::PhantomData,
    }
}

/// How an option is named in a message: `--name`, or `<NAME>` for a positional argument.
fn option_name(arg: Option<&clap::Arg>) -> String {
    let Some(a) = arg else {
        return "the value".into();
    };
    match a.get_long() {
        Some(l) => format!("--{l}"),
        None => match a.get_value_names().and_then(|v| v.first()) {
            Some(v) => format!("<{v}>"),
            None => format!("<{}>", a.get_id().as_str().to_uppercase()),
        },
    }
}

impl<T: TryFrom<u64> + Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Whole<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let name = option_name(arg);
        let s = value.to_string_lossy();
        let fail = |why: String| {
            let mut cmd = cmd.clone();
            cmd.error(clap::error::ErrorKind::ValueValidation, format!("{name} {why}"))
        };
        // A negative whole number is below the bound, said as such (the option takes it as a
        // value: `allow_negative_numbers` on each such option).
        if let Ok(v) = s.trim().parse::<i128>() {
            if v < 0 {
                return Err(fail(format!("must be at least {} (got {v})", self.min)));
            }
        }
        let v: u64 = s.trim().parse().map_err(|_| {
            fail(format!(
                "takes a whole number from {} to {} (got '{s}')",
                self.min, self.max
            ))
        })?;
        if v < self.min {
            return Err(fail(format!("must be at least {} (got {v})", self.min)));
        }
        if v > self.max {
            return Err(fail(format!("must be at most {} (got {v})", self.max)));
        }
        T::try_from(v).map_err(|_| fail(format!("must be at most {} (got {v})", self.max)))
    }
}
