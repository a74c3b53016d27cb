//! Reader of the process' own memory counters in `/proc/self/status` (Linux):
//! VmRSS, VmHWM, VmLck, VmPin, VmData, VmSize, all in KiB as the kernel prints them.

use std::path::Path;

/// Memory counters of one process, in KiB (`/proc/<pid>/status`, see `proc(5)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStatus {
    /// Resident set size (`VmRSS`), KiB.
    pub vm_rss_kb: u64,
    /// Peak resident set size (`VmHWM`), KiB.
    pub vm_hwm_kb: u64,
    /// Locked memory (`VmLck`, mlock), KiB.
    pub vm_lck_kb: u64,
    /// Pinned memory (`VmPin`, e.g. RDMA registrations), KiB.
    pub vm_pin_kb: u64,
    /// Data segment plus private writable mappings (`VmData`), KiB.
    pub vm_data_kb: u64,
    /// Virtual size (`VmSize`), KiB.
    pub vm_size_kb: u64,
}

impl ProcStatus {
    /// Reads `/proc/self/status`.
    pub fn read_self() -> std::io::Result<ProcStatus> {
        Self::read_path(Path::new("/proc/self/status"))
    }

    /// Reads a status file at `path`.
    pub fn read_path(path: &Path) -> std::io::Result<ProcStatus> {
        Ok(Self::parse(&std::fs::read_to_string(path)?))
    }

    /// Parses the text of a status file; missing fields stay 0.
    pub fn parse(text: &str) -> ProcStatus {
        let mut s = ProcStatus::default();
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let field = match key.trim() {
                "VmRSS" => &mut s.vm_rss_kb,
                "VmHWM" => &mut s.vm_hwm_kb,
                "VmLck" => &mut s.vm_lck_kb,
                "VmPin" => &mut s.vm_pin_kb,
                "VmData" => &mut s.vm_data_kb,
                "VmSize" => &mut s.vm_size_kb,
                _ => continue,
            };
            if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                *field = v;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_format() {
        let text = "Name:\tx\nVmPeak:\t  3776 kB\nVmSize:\t    3760 kB\nVmLck:\t       12 kB\nVmPin:\t 8 kB\nVmHWM:\t    2132 kB\nVmRSS:\t    2100 kB\nVmData:\t     292 kB\n";
        let s = ProcStatus::parse(text);
        assert_eq!(s.vm_rss_kb, 2100);
        assert_eq!(s.vm_hwm_kb, 2132);
        assert_eq!(s.vm_lck_kb, 12);
        assert_eq!(s.vm_pin_kb, 8);
        assert_eq!(s.vm_data_kb, 292);
        assert_eq!(s.vm_size_kb, 3760);
    }

    #[test]
    fn reads_own_status_and_sees_allocation() {
        let before = ProcStatus::read_self().unwrap();
        assert!(before.vm_rss_kb > 0 && before.vm_data_kb > 0);
        let v = vec![1u8; 32 << 20];
        let after = ProcStatus::read_self().unwrap();
        assert!(
            after.vm_data_kb >= before.vm_data_kb + 30 * 1024,
            "{before:?} {after:?}"
        );
        assert!(
            after.vm_rss_kb >= before.vm_rss_kb + 30 * 1024,
            "{before:?} {after:?}"
        );
        drop(v);
    }
}
