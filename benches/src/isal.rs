//! Minimal FFI shim over ISA-L's erasure code (`ec_init_tables` + `ec_encode_data`) for the
//! Reed-Solomon comparison bench. Built only when `build.rs` found `libisal` (`cfg(have_isal)`);
//! otherwise `IsalEncoder::new` returns the reason it is unavailable.

/// Why ISA-L is missing from this build, or `None` when it is linked.
pub fn unavailable_reason() -> Option<&'static str> {
    let reason = env!("REVERB_ISAL_SKIP_REASON");
    if cfg!(have_isal) {
        None
    } else if reason.is_empty() {
        Some("ISA-L was not probed by build.rs")
    } else {
        Some(reason)
    }
}

/// GF(2^8) encoder for k data + m parity shards with caller-supplied coefficients.
pub struct IsalEncoder {
    data_shards: usize,
    parity_shards: usize,
    /// ISA-L's expanded multiplication tables, 32 bytes per coefficient.
    tables: Vec<u8>,
}

impl IsalEncoder {
    /// `coefficients` is the m x k parity matrix, row-major (`parity[i] = sum_j c[i*k+j] * data[j]`).
    pub fn new(data_shards: usize, parity_shards: usize, coefficients: &[u8]) -> Result<Self, String> {
        if let Some(reason) = unavailable_reason() {
            return Err(reason.to_string());
        }
        if data_shards == 0 || parity_shards == 0 || data_shards + parity_shards > 255 {
            return Err(format!("unsupported geometry {data_shards}+{parity_shards}"));
        }
        if coefficients.len() != data_shards * parity_shards {
            return Err(format!(
                "expected {} coefficients, got {}",
                data_shards * parity_shards,
                coefficients.len()
            ));
        }
        let mut tables = vec![0u8; 32 * data_shards * parity_shards];
        ffi::init_tables(data_shards, parity_shards, coefficients, &mut tables);
        Ok(Self { data_shards, parity_shards, tables })
    }

    /// Writes the m parity shards of the k data shards; all must be `shard_len` bytes long.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), String> {
        if data.len() != self.data_shards || parity.len() != self.parity_shards {
            return Err(format!(
                "expected {}+{} shards, got {}+{}",
                self.data_shards,
                self.parity_shards,
                data.len(),
                parity.len()
            ));
        }
        let shard_len = data[0].len();
        if data.iter().map(|s| s.len()).chain(parity.iter().map(|s| s.len())).any(|len| len != shard_len) {
            return Err("all shards must have the same length".into());
        }
        let Ok(len) = i32::try_from(shard_len) else {
            return Err(format!("shard length {shard_len} exceeds ISA-L's int length"));
        };
        ffi::encode(&self.tables, len, data, parity);
        Ok(())
    }
}

#[cfg(have_isal)]
mod ffi {
    use std::os::raw::{c_int, c_uchar};

    extern "C" {
        fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
    }

    /// Callers checked: k, m >= 1, k + m <= 255, coefficients.len() == k*m, tables.len() == 32*k*m.
    pub(super) fn init_tables(k: usize, m: usize, coefficients: &[u8], tables: &mut [u8]) {
        assert!(coefficients.len() == k * m && tables.len() == 32 * k * m);
        // SAFETY: ec_init_tables reads k*m coefficient bytes and writes 32*k*m table bytes; the
        // assert above guarantees both buffers are that long. It does not write through `a`; the
        // `*mut` is only the C prototype's constness. k and m are <= 255 so the casts are exact.
        unsafe {
            ec_init_tables(k as c_int, m as c_int, coefficients.as_ptr().cast_mut(), tables.as_mut_ptr())
        }
    }

    /// Callers checked: data.len()*parity.len()*32 == tables.len(), every shard `len` bytes.
    pub(super) fn encode(tables: &[u8], len: c_int, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        let (k, m) = (data.len(), parity.len());
        let shard_len = usize::try_from(len).unwrap_or(usize::MAX);
        assert!(tables.len() == 32 * k * m);
        assert!(data.iter().all(|s| s.len() == shard_len) && parity.iter().all(|s| s.len() == shard_len));
        let mut data_ptrs: Vec<*mut c_uchar> = data.iter().map(|s| s.as_ptr().cast_mut()).collect();
        let mut parity_ptrs: Vec<*mut c_uchar> = parity.iter_mut().map(|s| s.as_mut_ptr()).collect();
        // SAFETY: every data pointer is valid for `len` reads and every parity pointer for `len`
        // writes (lengths asserted above); the parity slices are exclusive borrows, so they don't
        // alias the inputs or each other. ISA-L only reads `data` and `gftbls` (non-const in its
        // prototype only) and keeps no pointer after returning. tables holds 32*k*m bytes as
        // ec_encode_data requires for k inputs and m rows.
        unsafe {
            ec_encode_data(
                len,
                k as c_int,
                m as c_int,
                tables.as_ptr().cast_mut(),
                data_ptrs.as_mut_ptr(),
                parity_ptrs.as_mut_ptr(),
            )
        }
    }
}

#[cfg(not(have_isal))]
mod ffi {
    // Unreachable: IsalEncoder::new fails first when ISA-L is missing.
    pub(super) fn init_tables(_k: usize, _m: usize, _coefficients: &[u8], _tables: &mut [u8]) {}

    pub(super) fn encode(_tables: &[u8], _len: i32, _data: &[&[u8]], _parity: &mut [&mut [u8]]) {}
}
