// Shared by the bodies that run the simulator (fault_plan, scenario_file,
// fabric_file); included once beside them.

/// HCCL's default exec timeout (1836 s) for inputs of even length, none for
/// odd ones: both the timeout path and runs to the end of time get fuzzed.
fn fuzz_timeout(data: &[u8]) -> Option<u64> {
    data.len().is_multiple_of(2).then_some(1_836_000_000_000)
}
