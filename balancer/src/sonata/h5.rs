//! HDF5 reading helpers for SONATA files: whole-dataset (or chunked) integer and string reads
//! with errors that name the file, population and dataset.
use std::path::Path;

use hdf5::types::{FixedAscii, FixedUnicode, TypeDescriptor, VarLenAscii, VarLenUnicode};
use hdf5_metno as hdf5;

use crate::error::BalancerError;

/// Elements per read when converting large id datasets (8 MB of `u64` at a time).
const CHUNK: usize = 1 << 20;

/// Where a read happens, for error messages.
#[derive(Clone, Debug)]
pub(crate) struct Ctx<'a> {
    pub file: &'a Path,
    pub population: &'a str,
}

impl Ctx<'_> {
    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> BalancerError {
        BalancerError::Sonata {
            path: self.file.to_path_buf(),
            population: self.population.to_owned(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Opens an HDF5 file; a missing file says which config field named it.
pub(crate) fn open_file(path: &Path, config: &Path, field: &str) -> Result<hdf5::File, BalancerError> {
    let err = |message: String| BalancerError::Sonata {
        path: path.to_path_buf(),
        population: String::new(),
        field: String::new(),
        message,
    };
    if !path.exists() {
        return Err(err(format!(
            "no such file (named by {field} in {})",
            config.display()
        )));
    }
    // HDF5 opens the path itself, blocking on a FIFO: checked first without blocking
    // ([`crate::read_file`]). The path could be swapped in between; HDF5 then fails on a
    // device's missing signature, and only a FIFO swapped in that instant would block.
    drop(
        crate::read_file::open_regular(path)
            .map_err(|e| err(format!("{e} (named by {field} in {})", config.display())))?,
    );
    hdf5::File::open(path).map_err(|e| {
        err(format!(
            "cannot open as HDF5 (named by {field} in {}): {e}",
            config.display()
        ))
    })
}

/// A dataset that must exist.
pub(crate) fn dataset(ctx: &Ctx, group: &hdf5::Group, name: &str) -> Result<hdf5::Dataset, BalancerError> {
    let field = format!("{}/{name}", group.name());
    if !group.link_exists(name) {
        return Err(ctx.err(field, "missing dataset"));
    }
    group
        .dataset(name)
        .map_err(|e| ctx.err(field, format!("not a readable dataset: {e}")))
}

/// A dataset that may be absent.
pub(crate) fn optional_dataset(
    ctx: &Ctx,
    group: &hdf5::Group,
    name: &str,
) -> Result<Option<hdf5::Dataset>, BalancerError> {
    if group.link_exists(name) {
        dataset(ctx, group, name).map(Some)
    } else {
        Ok(None)
    }
}

/// A sub-group that must exist.
pub(crate) fn group(ctx: &Ctx, parent: &hdf5::Group, name: &str) -> Result<hdf5::Group, BalancerError> {
    let field = format!("{}/{name}", parent.name().trim_end_matches('/'));
    if !parent.link_exists(name) {
        return Err(ctx.err(field, "missing group"));
    }
    parent
        .group(name)
        .map_err(|e| ctx.err(field, format!("not a readable group: {e}")))
}

/// The dataset's length, requiring it to be one-dimensional.
pub(crate) fn len_1d(ctx: &Ctx, ds: &hdf5::Dataset) -> Result<usize, BalancerError> {
    let shape = ds.shape();
    if shape.len() != 1 {
        return Err(ctx.err(
            ds.name(),
            format!("expected a one-dimensional dataset, found shape {shape:?}"),
        ));
    }
    Ok(shape[0])
}

enum IntKind {
    Signed,
    Unsigned,
}

fn int_kind(ctx: &Ctx, ds: &hdf5::Dataset) -> Result<IntKind, BalancerError> {
    let desc = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| ctx.err(ds.name(), format!("unreadable datatype: {e}")))?;
    match desc {
        TypeDescriptor::Integer(_) => Ok(IntKind::Signed),
        TypeDescriptor::Unsigned(_) => Ok(IntKind::Unsigned),
        other => Err(ctx.err(ds.name(), format!("expected integers, found {other}"))),
    }
}

/// Reads a 1-D integer dataset (any integer width) into `u32`s, in chunks so that a 100M
/// element `u64` dataset never exists in memory at full width. Each value must lie in
/// `0..limit` (`limit ≤ 2³²`); `what` describes the limit for the message
/// (e.g. "node population `A` (3 nodes)").
pub(crate) fn read_u32(
    ctx: &Ctx,
    ds: &hdf5::Dataset,
    limit: u64,
    what: &str,
) -> Result<Vec<u32>, BalancerError> {
    let n = len_1d(ctx, ds)?;
    let kind = int_kind(ctx, ds)?;
    let limit = limit.min(1 << 32);
    let mut out = Vec::with_capacity(n);
    let read_err = |e: hdf5::Error| ctx.err(ds.name(), format!("read failed: {e}"));
    let bad = |i: usize, v: String| {
        ctx.err(
            ds.name(),
            format!("value {v} at index {i} is out of range of {what}: must be in 0..{limit}"),
        )
    };
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        match kind {
            IntKind::Unsigned => {
                let chunk = ds.read_slice_1d::<u64, _>(start..end).map_err(read_err)?;
                for (k, &v) in chunk.iter().enumerate() {
                    if v >= limit {
                        return Err(bad(start + k, v.to_string()));
                    }
                    out.push(v as u32);
                }
            }
            IntKind::Signed => {
                let chunk = ds.read_slice_1d::<i64, _>(start..end).map_err(read_err)?;
                for (k, &v) in chunk.iter().enumerate() {
                    if v < 0 || v as u64 >= limit {
                        return Err(bad(start + k, v.to_string()));
                    }
                    out.push(v as u32);
                }
            }
        }
        start = end;
    }
    Ok(out)
}

/// Reads a 1-D integer dataset as `i64` (e.g. `node_type_id`, where -1 means "none").
pub(crate) fn read_i64(ctx: &Ctx, ds: &hdf5::Dataset) -> Result<Vec<i64>, BalancerError> {
    len_1d(ctx, ds)?;
    int_kind(ctx, ds)?;
    ds.read_raw::<i64>()
        .map_err(|e| ctx.err(ds.name(), format!("read failed: {e}")))
}

/// Whether a dataset holds strings (rather than, say, indices into `@library`).
pub(crate) fn is_string(ds: &hdf5::Dataset) -> bool {
    matches!(
        ds.dtype().and_then(|t| t.to_descriptor()),
        Ok(TypeDescriptor::VarLenUnicode
            | TypeDescriptor::VarLenAscii
            | TypeDescriptor::FixedAscii(_)
            | TypeDescriptor::FixedUnicode(_))
    )
}

/// Longest fixed-length string read (longer ones are cut by HDF5's conversion).
const FIXED: usize = 256;

/// Reads a 1-D string dataset (variable or fixed length, ASCII or UTF-8).
pub(crate) fn read_strings(ctx: &Ctx, ds: &hdf5::Dataset) -> Result<Vec<String>, BalancerError> {
    len_1d(ctx, ds)?;
    let err = |e: hdf5::Error| ctx.err(ds.name(), format!("read failed: {e}"));
    let desc = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| ctx.err(ds.name(), format!("unreadable datatype: {e}")))?;
    Ok(match desc {
        TypeDescriptor::VarLenUnicode => ds
            .read_raw::<VarLenUnicode>()
            .map_err(err)?
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        TypeDescriptor::VarLenAscii => ds
            .read_raw::<VarLenAscii>()
            .map_err(err)?
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        TypeDescriptor::FixedAscii(_) => ds
            .read_raw::<FixedAscii<FIXED>>()
            .map_err(err)?
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        TypeDescriptor::FixedUnicode(_) => ds
            .read_raw::<FixedUnicode<FIXED>>()
            .map_err(err)?
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        other => return Err(ctx.err(ds.name(), format!("expected strings, found {other}"))),
    })
}

/// Reads a scalar string attribute (e.g. `node_population`).
pub(crate) fn read_str_attr(ctx: &Ctx, ds: &hdf5::Dataset, name: &str) -> Result<String, BalancerError> {
    let field = format!("{}@{name}", ds.name());
    let attr = ds
        .attr(name)
        .map_err(|_| ctx.err(field.clone(), "missing attribute"))?;
    let err = |e: hdf5::Error| ctx.err(field.clone(), format!("not a readable string: {e}"));
    let desc = attr.dtype().and_then(|t| t.to_descriptor()).map_err(err)?;
    let s = match desc {
        TypeDescriptor::VarLenUnicode => attr
            .read_scalar::<VarLenUnicode>()
            .map_err(err)?
            .as_str()
            .to_owned(),
        TypeDescriptor::VarLenAscii => attr
            .read_scalar::<VarLenAscii>()
            .map_err(err)?
            .as_str()
            .to_owned(),
        TypeDescriptor::FixedAscii(_) => attr
            .read_scalar::<FixedAscii<FIXED>>()
            .map_err(err)?
            .as_str()
            .to_owned(),
        TypeDescriptor::FixedUnicode(_) => attr
            .read_scalar::<FixedUnicode<FIXED>>()
            .map_err(err)?
            .as_str()
            .to_owned(),
        other => return Err(ctx.err(field, format!("expected a string, found {other}"))),
    };
    Ok(s)
}

/// Names of a group's members, sorted (HDF5's own order).
pub(crate) fn members(ctx: &Ctx, group: &hdf5::Group) -> Result<Vec<String>, BalancerError> {
    group
        .member_names()
        .map_err(|e| ctx.err(group.name(), format!("cannot list members: {e}")))
}
