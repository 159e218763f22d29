//! The house rule for `unsafe`: one boundary module per crate. `acl.rs`
//! and `hccl_api.rs` allow the `unsafe_code` lint only for `#[no_mangle]`
//! (which the lint also flags); this test keeps every `unsafe` block,
//! function and impl in `boundary.rs`.

#[test]
fn unsafe_code_lives_in_the_boundary_module_only() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("bin/hccl-capi.rs")];
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
    assert!(files.len() > 10, "{files:?}");
    for f in files {
        if f.ends_with("boundary.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"] {
                assert!(
                    !code.contains(bad),
                    "{}:{}: `{bad}` outside boundary.rs: {line}",
                    f.display(),
                    i + 1
                );
            }
        }
    }
}
