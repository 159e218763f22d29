//! `--plot FILE`: an SVG of bus bandwidth against size (log2 axis), one
//! line per algorithm.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::output::Row;

/// Line colours, cycled.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// `1536` -> `1.5K`, for tick labels (powers of 1024).
pub(crate) fn short_size(b: f64) -> String {
    let units = ["", "K", "M", "G", "T"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{}{}", v.round(), units[u])
    } else {
        format!("{v:.1}{}", units[u])
    }
}

/// Writes the plot of `rows` (grouped by algorithm, in first-seen order)
/// to `path`, titled `title`.
///
/// # Errors
/// A message if the file cannot be drawn or written.
pub(crate) fn write_svg(path: &Path, title: &str, rows: &[Row]) -> Result<(), String> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.size_bytes > 0) {
        let i = *index.entry(r.algorithm.clone()).or_insert_with(|| {
            series.push((r.algorithm.clone(), Vec::new()));
            series.len() - 1
        });
        series[i].1.push((r.size_bytes as f64, r.busbw_gbps));
    }
    let xs = || series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let x_min = xs().fold(f64::INFINITY, f64::min);
    let x_max = xs().fold(0.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
        (x_min, x_max)
    } else if x_min.is_finite() {
        (x_min / 2.0, x_min * 2.0)
    } else {
        (1.0, 2.0)
    };
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d((x_min..x_max).log_scale().base(2.0), 0.0..y_top)?;
        chart
            .configure_mesh()
            .x_desc("size (bytes, log2)")
            .y_desc("busbw (GB/s)")
            .x_label_formatter(&|x| short_size(*x))
            .draw()?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot write the plot {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_use_powers_of_1024() {
        assert_eq!(short_size(8192.0), "8K");
        assert_eq!(short_size(67_108_864.0), "64M");
        assert_eq!(short_size(1536.0), "1.5K");
        assert_eq!(short_size(100.0), "100");
    }
}
