// Shared by the stable tests that replay a committed corpus (each crate's
// tests/fuzz_corpus.rs, hw/tests/tcp_frame_corpus.rs); included once
// beside the body it replays.

/// (file name, bytes) of every file of `fuzz/corpus/<target>`, sorted by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/../fuzz/corpus/{target}", env!("CARGO_MANIFEST_DIR"));
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect()
}
