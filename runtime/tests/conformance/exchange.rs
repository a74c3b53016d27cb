//! [`Exchange`]: ranks' results as bytes, so a multi-process launcher can give every
//! process the results of all ranks.

use ballast_runtime::{Error, Result};

/// A rank's result as bytes, so that multi-process launchers (MPI) can give every process
/// the results of all ranks. Errors travel as their message ([`Error::Remote`]).
pub trait Exchange: Sized {
    /// Appends the encoding of `self`.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes one value from the front of `inp`, advancing it.
    fn get(inp: &mut &[u8]) -> Self;
}

fn take<'a>(inp: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (a, b) = inp.split_at(n);
    *inp = b;
    a
}

macro_rules! exchange_int {
    ($($t:ty),*) => {$(
        impl Exchange for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&(*self as u64).to_le_bytes());
            }
            fn get(inp: &mut &[u8]) -> Self {
                u64::from_le_bytes(take(inp, 8).try_into().unwrap()) as $t
            }
        }
    )*};
}
exchange_int!(u8, u32, u64, usize);

impl Exchange for bool {
    fn put(&self, out: &mut Vec<u8>) {
        (*self as u64).put(out)
    }
    fn get(inp: &mut &[u8]) -> Self {
        u64::get(inp) != 0
    }
}

impl<T: Exchange> Exchange for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        self.len().put(out);
        self.iter().for_each(|x| x.put(out));
    }
    fn get(inp: &mut &[u8]) -> Self {
        let n = usize::get(inp);
        (0..n).map(|_| T::get(inp)).collect()
    }
}

macro_rules! exchange_tuple {
    ($($n:ident),*) => {
        impl<$($n: Exchange),*> Exchange for ($($n,)*) {
            #[allow(non_snake_case)]
            fn put(&self, out: &mut Vec<u8>) {
                let ($($n,)*) = self;
                $($n.put(out);)*
            }
            fn get(inp: &mut &[u8]) -> Self {
                ($($n::get(inp),)*)
            }
        }
    };
}
exchange_tuple!(A, B);
exchange_tuple!(A, B, C);
exchange_tuple!(A, B, C, D);
exchange_tuple!(A, B, C, D, E);
exchange_tuple!(A, B, C, D, E, F);

impl Exchange for ballast_runtime::Footprint {
    fn put(&self, out: &mut Vec<u8>) {
        self.fields().iter().for_each(|f| f.value.put(out));
    }
    fn get(inp: &mut &[u8]) -> Self {
        // As many words as `put` wrote: every field of the footprint, in its order.
        let n = ballast_runtime::Footprint::default().fields().len();
        let v: Vec<u64> = (0..n).map(|_| u64::get(inp)).collect();
        ballast_runtime::Footprint::from_fields(&v)
    }
}

impl<T: Exchange> Exchange for Result<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Ok(v) => {
                out.push(1);
                v.put(out);
            }
            Err(e) => {
                out.push(0);
                e.to_string().into_bytes().put(out);
            }
        }
    }
    fn get(inp: &mut &[u8]) -> Self {
        if take(inp, 1)[0] == 1 {
            Ok(T::get(inp))
        } else {
            Err(Error::Remote {
                process: None,
                message: String::from_utf8_lossy(&Vec::<u8>::get(inp)).into_owned(),
            })
        }
    }
}
