//! The element types and operations of `Communicator::all_reduce`: [`ReduceOp`],
//! [`ReduceType`], the [`Reducible`] element trait and [`ReduceSlice`], a typed buffer
//! that the engine's algorithm and MPI's own `MPI_Allreduce` both take.

/// A reduction: applied element by element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (integers wrap on overflow, as MPI's do in practice; doubles round as
    /// IEEE 754 does, in the order the algorithm documents).
    Sum,
    /// The minimum (doubles: a NaN operand gives NaN).
    Min,
    /// The maximum (doubles: a NaN operand gives NaN).
    Max,
}

impl ReduceOp {
    /// The name in errors and docs (`sum`, `min`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

/// The element type of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceType {
    /// `i32` (`MPI_INT32_T`).
    I32,
    /// `i64` (`MPI_INT64_T`).
    I64,
    /// `u64` (`MPI_UINT64_T`).
    U64,
    /// `f64` (`MPI_DOUBLE`).
    F64,
}

impl ReduceType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ReduceType::I32 => 4,
            ReduceType::I64 | ReduceType::U64 | ReduceType::F64 => 8,
        }
    }
}

/// A rank's buffer of a reduction, by element type: the input, replaced by the result.
#[derive(Debug)]
pub enum ReduceSlice<'a> {
    /// `i32` elements.
    I32(&'a mut [i32]),
    /// `i64` elements.
    I64(&'a mut [i64]),
    /// `u64` elements.
    U64(&'a mut [u64]),
    /// `f64` elements.
    F64(&'a mut [f64]),
}

impl ReduceSlice<'_> {
    /// The element type.
    pub fn ty(&self) -> ReduceType {
        match self {
            ReduceSlice::I32(_) => ReduceType::I32,
            ReduceSlice::I64(_) => ReduceType::I64,
            ReduceSlice::U64(_) => ReduceType::U64,
            ReduceSlice::F64(_) => ReduceType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ReduceSlice::I32(s) => s.len(),
            ReduceSlice::I64(s) => s.len(),
            ReduceSlice::U64(s) => s.len(),
            ReduceSlice::F64(s) => s.len(),
        }
    }

    /// True with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An element type `Communicator::all_reduce` takes: `i32`, `i64`, `u64`, `f64`.
pub trait Reducible: Copy + sealed::Sealed {
    /// The buffer `data` as a [`ReduceSlice`].
    fn slice(data: &mut [Self]) -> ReduceSlice<'_>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u64 {}
    impl Sealed for f64 {}
}

impl Reducible for i32 {
    fn slice(data: &mut [i32]) -> ReduceSlice<'_> {
        ReduceSlice::I32(data)
    }
}
impl Reducible for i64 {
    fn slice(data: &mut [i64]) -> ReduceSlice<'_> {
        ReduceSlice::I64(data)
    }
}
impl Reducible for u64 {
    fn slice(data: &mut [u64]) -> ReduceSlice<'_> {
        ReduceSlice::U64(data)
    }
}
impl Reducible for f64 {
    fn slice(data: &mut [f64]) -> ReduceSlice<'_> {
        ReduceSlice::F64(data)
    }
}
