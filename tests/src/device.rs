//! The typed collectives and point-to-point calls on device buffers
//! (`Comm::device_buffer`), each checked against values worked out by
//! hand for rank `r` of `n` (not by the library): every collective, in
//! place, mixed host and device sides, V calls with gaps and reordered
//! blocks. The same function runs on the simulator, on TCP and on the
//! Ascend backend (`capi/tests/ascend.rs`).

use hccl::comm::ReduceOp;
use hccl::{Comm, CommError, DeviceBuffer, P2pItem};

type R<T> = Result<T, CommError>;

/// `v` in a new device buffer of `c`.
fn dev(c: &Comm, v: &[f32]) -> R<DeviceBuffer<f32>> {
    c.device_buffer_from(v)
}

/// Every typed call on device buffers on this rank of `c`: the failures
/// (op, got, wanted). Every rank must run it.
pub fn typed_calls(c: &Comm) -> Vec<String> {
    let (r, n) = (c.rank() as usize, c.size() as usize);
    let (rf, nf) = (r as f32, n as f32);
    let tri = (n * (n + 1) / 2) as f32;
    let last = (n - 1) as u32;
    let mut bad = Vec::new();
    let mut check = |name: &str, got: R<Vec<f32>>, want: Vec<f32>| match got {
        Ok(g) if g == want => {}
        Ok(g) => bad.push(format!("rank {r}: {name}: got {g:?}, want {want:?}")),
        Err(e) => bad.push(format!("rank {r}: {name}: {e}")),
    };

    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &[rf + 1.0, 10.0 * (rf + 1.0), 3.0])?;
        let mut o = c.device_buffer::<f32>(3)?;
        c.all_reduce(&s, &mut o, ReduceOp::Sum)?;
        o.to_vec()
    })();
    check("AllReduce", got, vec![tri, 10.0 * tri, 3.0 * nf]);

    let got: R<Vec<f32>> = (|| {
        let mut b = dev(c, &[rf, -rf])?;
        c.all_reduce_in_place(&mut b, ReduceOp::Max)?;
        b.to_vec()
    })();
    check("AllReduce in place, Max", got, vec![nf - 1.0, 0.0]);

    // Mixed: a host send into a device receive, and the other way round.
    let got: R<Vec<f32>> = (|| {
        let mut o = c.device_buffer::<f32>(2)?;
        c.all_reduce(&[1.0f32, rf], &mut o, ReduceOp::Sum)?;
        let mut host = vec![0f32; 2];
        c.all_reduce(&o, &mut host, ReduceOp::Sum)?;
        Ok(host)
    })();
    check(
        "AllReduce host->device->host",
        got,
        vec![nf * nf, nf * (tri - nf)],
    );

    let gathered: Vec<f32> = (0..n).flat_map(|i| [i as f32, i as f32 + 0.5]).collect();
    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &[rf, rf + 0.5])?;
        let mut o = c.device_buffer::<f32>(2 * n)?;
        c.all_gather(&s, &mut o)?;
        o.to_vec()
    })();
    check("AllGather", got, gathered.clone());

    let got: R<Vec<f32>> = (|| {
        let mut v = vec![-1f32; 2 * n];
        v[2 * r..2 * r + 2].copy_from_slice(&[rf, rf + 0.5]);
        let mut b = dev(c, &v)?;
        c.all_gather_in_place(&mut b)?;
        b.to_vec()
    })();
    check("AllGather in place", got, gathered);

    // Block j of rank i: [j + 100 i, 1]; rank r gets the sums of block r.
    let hundreds = 100.0 * (tri - nf);
    let send_rs: Vec<f32> = (0..n).flat_map(|j| [j as f32 + 100.0 * rf, 1.0]).collect();
    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &send_rs)?;
        let mut o = c.device_buffer::<f32>(2)?;
        c.reduce_scatter(&s, &mut o, ReduceOp::Sum)?;
        o.to_vec()
    })();
    check("ReduceScatter", got, vec![nf * rf + hundreds, nf]);

    let got: R<Vec<f32>> = (|| {
        let mut b = dev(c, &send_rs)?;
        c.reduce_scatter_in_place(&mut b, ReduceOp::Sum)?;
        Ok(b.to_vec()?[2 * r..2 * r + 2].to_vec())
    })();
    check("ReduceScatter in place", got, vec![nf * rf + hundreds, nf]);

    let got: R<Vec<f32>> = (|| {
        let v = if r == n - 1 {
            [7.0, 8.0, 9.0]
        } else {
            [0.0; 3]
        };
        let mut b = dev(c, &v)?;
        c.broadcast(&mut b, last)?;
        b.to_vec()
    })();
    check("Broadcast from the last rank", got, vec![7.0, 8.0, 9.0]);

    // Non-roots' receive buffers are not written.
    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &[rf + 1.0])?;
        let mut o = dev(c, &[-5.0])?;
        c.reduce(&s, &mut o, ReduceOp::Sum, 0)?;
        o.to_vec()
    })();
    check("Reduce to 0", got, vec![if r == 0 { tri } else { -5.0 }]);

    let got: R<Vec<f32>> = (|| {
        let all: Vec<f32> = (0..n).flat_map(|i| [i as f32, 2.0 * i as f32]).collect();
        let s = if r == n - 1 {
            dev(c, &all)?
        } else {
            dev(c, &[])?
        };
        let mut o = c.device_buffer::<f32>(2)?;
        c.scatter(&s, &mut o, last)?;
        o.to_vec()
    })();
    check("Scatter from the last rank", got, vec![rf, 2.0 * rf]);

    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &[rf, -rf])?;
        let mut o = dev(c, &vec![-5.0; 2 * n])?;
        c.gather(&s, &mut o, 0)?;
        o.to_vec()
    })();
    let want = match r {
        0 => (0..n).flat_map(|i| [i as f32, -(i as f32)]).collect(),
        _ => vec![-5.0; 2 * n],
    };
    check("Gather to 0", got, want);

    let got: R<Vec<f32>> = (|| {
        let s: Vec<f32> = (0..n).map(|j| 100.0 * rf + j as f32).collect();
        let s = dev(c, &s)?;
        let mut o = c.device_buffer::<f32>(n)?;
        c.all_to_all(&s, &mut o)?;
        o.to_vec()
    })();
    check(
        "AllToAll",
        got,
        (0..n).map(|i| 100.0 * i as f32 + rf).collect(),
    );

    // V calls: rank i's block has i + 1 elements; slots n + 1 wide, in
    // reverse rank order, after one leading element (gaps, reordered).
    let counts: Vec<u64> = (0..n as u64).map(|i| i + 1).collect();
    let gappy: Vec<u64> = (0..n as u64)
        .map(|i| 1 + (n as u64 - 1 - i) * (n as u64 + 1))
        .collect();
    let packed: Vec<u64> = (0..n as u64).map(|i| i * (i + 1) / 2).collect();
    let vlen = 1 + n * (n + 1);
    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &vec![rf; r + 1])?;
        let mut o = dev(c, &vec![-1.0; vlen])?;
        c.all_gather_v(&s, &mut o, &counts, &gappy)?;
        o.to_vec()
    })();
    let mut want = vec![-1f32; vlen];
    for i in 0..n {
        let at = gappy[i] as usize;
        want[at..at + i + 1].fill(i as f32);
    }
    check("AllGatherV, gaps", got, want);

    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &vec![rf; r + 1])?;
        let mut o = c.device_buffer::<f32>(tri as usize)?;
        c.all_gather_v(&s, &mut o, &counts, &packed)?;
        o.to_vec()
    })();
    check(
        "AllGatherV, packed",
        got,
        (0..n).flat_map(|i| vec![i as f32; i + 1]).collect(),
    );

    // Rank i's send block j: j + 1 elements of 10 (j + 1) + i.
    let got: R<Vec<f32>> = (|| {
        let mut s = vec![-1f32; vlen];
        for j in 0..n {
            let at = gappy[j] as usize;
            s[at..at + j + 1].fill(10.0 * (j as f32 + 1.0) + rf);
        }
        let s = dev(c, &s)?;
        let mut o = c.device_buffer::<f32>(r + 1)?;
        c.reduce_scatter_v(&s, &counts, &gappy, &mut o, ReduceOp::Sum)?;
        o.to_vec()
    })();
    check(
        "ReduceScatterV, gaps",
        got,
        vec![nf * 10.0 * (rf + 1.0) + (tri - nf); r + 1],
    );

    // Rank i sends j + 1 elements of 100 i + j to rank j (packed); this
    // rank receives r + 1 from each, in gappy reversed slots.
    let got: R<Vec<f32>> = (|| {
        let s: Vec<f32> = (0..n)
            .flat_map(|j| vec![100.0 * rf + j as f32; j + 1])
            .collect();
        let s = dev(c, &s)?;
        let rc = vec![r as u64 + 1; n];
        let rd: Vec<u64> = (0..n as u64)
            .map(|i| 1 + (n as u64 - 1 - i) * (r as u64 + 2))
            .collect();
        let mut o = dev(c, &vec![-1.0; 1 + n * (r + 2)])?;
        c.all_to_all_v(&s, &counts, &packed, &mut o, &rc, &rd)?;
        o.to_vec()
    })();
    let mut want = vec![-1f32; 1 + n * (r + 2)];
    for i in 0..n {
        let at = 1 + (n - 1 - i) * (r + 2);
        want[at..at + r + 1].fill(100.0 * i as f32 + rf);
    }
    check("AllToAllV, gaps", got, want);

    // A ring in one batch, then a plain send and receive 0 -> 1.
    let got: R<Vec<f32>> = (|| {
        let s = dev(c, &[rf; 4])?;
        let mut o = c.device_buffer::<f32>(4)?;
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        c.batch_send_recv(&mut [
            P2pItem::send(&s, next as u32),
            P2pItem::recv(&mut o, prev as u32),
        ])?;
        o.to_vec()
    })();
    check("BatchSendRecv ring", got, vec![((r + n - 1) % n) as f32; 4]);

    let got: R<Vec<f32>> = (|| {
        let mut b = dev(c, &[rf + 1.0, 2.0])?;
        match r {
            0 => c.send(&b, 1)?,
            1 => c.recv(&mut b, 0)?,
            _ => {}
        }
        b.to_vec()
    })();
    let want = if r == 1 {
        vec![1.0, 2.0]
    } else {
        vec![rf + 1.0, 2.0]
    };
    check("Send 0 -> Recv 1", got, want);

    if let Err(e) = c.barrier() {
        bad.push(format!("rank {r}: Barrier: {e}"));
    }
    bad
}
