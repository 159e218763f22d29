//! Rank names in the errors of a sub-communicator ([`super::Comm::split`]):
//! its ranks are its own, so an error names each with its world rank too,
//! "rank 1 (global 3)", as NCCL users read `ncclCommSplit` ranks.

/// `msg` with every "rank N" (N a rank of the communicator) followed by
/// " (global G)" and every "ranks [a, b]" by " (global [x, y])", where
/// `global[N] = G`. A rank already named so, or out of range, is left as
/// it is, so naming twice changes nothing.
pub(crate) fn name_global(msg: &str, global: &[u32]) -> String {
    let mut out = String::with_capacity(msg.len() + 16);
    let mut rest = msg;
    while let Some(i) = rest.find("rank") {
        let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        if !word_start {
            continue;
        }
        if let Some(after) = rest.strip_prefix(' ') {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            let named = after[digits..].starts_with(" (global");
            if let (Ok(r), false) = (after[..digits].parse::<usize>(), named) {
                if let Some(g) = global.get(r) {
                    out.push(' ');
                    out.push_str(&after[..digits]);
                    out.push_str(&format!(" (global {g})"));
                    rest = &after[digits..];
                }
            }
        } else if let Some(after) = rest.strip_prefix("s [") {
            let Some(end) = after.find(']') else { continue };
            let list: Option<Vec<u32>> = after[..end]
                .split(", ")
                .map(|r| r.parse::<usize>().ok().and_then(|r| global.get(r).copied()))
                .collect();
            let named = after[end + 1..].starts_with(" (global");
            if let (Some(list), false) = (list, named) {
                out.push_str("s [");
                out.push_str(&after[..=end]);
                out.push_str(&format!(" (global {list:?})"));
                rest = &after[end + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::name_global;

    #[test]
    fn local_ranks_get_their_world_ranks_once() {
        let g = [2, 3];
        let m = "comm 'w/s' AllReduce #0: rank 1 lost rank 0 (closed); waiting for ranks [0, 1]";
        let named = name_global(m, &g);
        assert_eq!(
            named,
            "comm 'w/s' AllReduce #0: rank 1 (global 3) lost rank 0 (global 2) (closed); waiting for ranks [0, 1] (global [2, 3])"
        );
        assert_eq!(name_global(&named, &g), named);
        // Out of range, or not a rank: unchanged.
        assert_eq!(
            name_global("rank 7, ranks [9], rank table, frank 1", &g),
            "rank 7, ranks [9], rank table, frank 1"
        );
    }
}
