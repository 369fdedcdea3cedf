//! What a process has used, from `/proc`: the benchmarks' CPU and memory columns.

/// CPU seconds (user and kernel) and peak RSS (VmHWM, MiB) of a process.
pub fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; `after_comm` starts at field 3.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let hz: f64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM");
    (ticks / hz, hwm_kib / 1024.0)
}

/// Starts a new peak: writing 5 to `clear_refs` resets VmHWM to the current RSS.
pub fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
}

/// The peak RSS the operator must stay under whatever a tenant sends or stores, MiB: room
/// under the chart's 512 MiB memory limit.
pub const PEAK_RSS_BOUND_MIB: f64 = 400.0;
