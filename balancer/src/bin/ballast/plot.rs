//! Per-rank memory pictures: stacked bars (cells, synapses, transport) for one or two
//! results side by side, with the lower bound as a line; SVG or PNG by the file extension.
use std::path::Path;

use anyhow::{bail, Context};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One result to draw: per rank, KB by kind.
pub struct Series {
    pub title: String,
    pub cells_kb: Vec<f64>,
    pub synapses_kb: Vec<f64>,
    pub transport_kb: Vec<f64>,
}

/// TrueType fonts tried for the plot's text. Debian: fonts-dejavu-core.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Errors unless `path` ends in `.svg` or `.png` and its directory exists (checked before
/// any work is done).
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg" | "png") => {}
        _ => bail!("{}: the plot file must end in .svg or .png", path.display()),
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            bail!("{}: the plot's directory {} does not exist", path.display(), dir.display())
        }
        _ => Ok(()),
    }
}

/// Draws `series` (one panel each, ranks on x, MiB on y) into `path` (`.svg` or `.png`),
/// with `lower_bound_kb` (mean rank total) as a horizontal line. Written to a temporary
/// file and renamed into place.
pub fn rank_bars(path: &Path, series: &[Series], lower_bound_kb: f64) -> anyhow::Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new().suffix(&format!(".{ext}")).tempfile_in(dir).with_context(|| format!("cannot write in {}", dir.display()))?;
    let size = (1200, 420 * series.len() as u32);
    check_path(path)?;
    // plotters lays text out with a registered font, for SVG too.
    let font = FONTS
        .iter()
        .find_map(|f| std::fs::read(f).ok())
        .context("plotting needs a TrueType font: install fonts-dejavu-core (apt-get install fonts-dejavu-core)")?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("cannot load the font {:?} for the plot", FONTS))?;
    if ext == "svg" {
        draw(&SVGBackend::new(tmp.path(), size).into_drawing_area(), series, lower_bound_kb)?
    } else {
        draw(&BitMapBackend::new(tmp.path(), size).into_drawing_area(), series, lower_bound_kb)?
    }
    tmp.persist(path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, series: &[Series], lower_bound_kb: f64) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plotting failed: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let mib = |kb: f64| kb / 1024.0;
    let top = series
        .iter()
        .flat_map(|s| (0..s.cells_kb.len()).map(move |r| s.cells_kb[r] + s.synapses_kb[r] + s.transport_kb[r]))
        .fold(lower_bound_kb, f64::max);
    let panels = root.split_evenly((series.len(), 1));
    for (s, area) in series.iter().zip(&panels) {
        let ranks = s.cells_kb.len();
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{}: memory per rank (MiB)", s.title), ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..ranks as f64, 0f64..mib(top) * 1.05)
            .map_err(err)?;
        chart.configure_mesh().x_desc("rank").y_desc("MiB").disable_x_mesh().light_line_style(WHITE).x_label_formatter(&|x| format!("{x:.0}")).draw().map_err(err)?;
        let parts: [(&str, &Vec<f64>, RGBColor); 3] = [
            ("cells", &s.cells_kb, RGBColor(70, 130, 180)),
            ("synapses", &s.synapses_kb, RGBColor(244, 164, 96)),
            ("transport", &s.transport_kb, RGBColor(205, 92, 92)),
        ];
        let mut base = vec![0.0; ranks];
        for (name, values, color) in parts {
            let bars: Vec<Rectangle<(f64, f64)>> = (0..ranks)
                .filter(|&r| values[r] > 0.0)
                .map(|r| {
                    let (y0, y1) = (mib(base[r]), mib(base[r] + values[r]));
                    Rectangle::new([(r as f64 + 0.1, y0), (r as f64 + 0.9, y1)], color.filled())
                })
                .collect();
            for r in 0..ranks {
                base[r] += values[r];
            }
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        }
        chart
            .draw_series(LineSeries::new([(0.0, mib(lower_bound_kb)), (ranks as f64, mib(lower_bound_kb))], BLACK.stroke_width(2)))
            .map_err(err)?
            .label("lower bound: (cells + synapses) / ranks")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 10, y)], BLACK.stroke_width(2)));
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
