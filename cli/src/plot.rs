//! Per-rank memory pictures: stacked bars (cells, synapses, transport) for one or two
//! results side by side, with the lower bound as a line; SVG or PNG by the file extension.
//! A plot is rendered in memory and written as an [`AtomicFile`] that the command commits
//! with its other outputs.
use std::path::Path;

use anyhow::{bail, Context};
use ballast_balancer::atomic::AtomicFile;
use ballast_balancer::{Allocation, DryRun};
use plotters::coord::types::RangedCoordf64;
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

/// Errors unless `path` ends in `.svg` or `.png`, its directory exists and it is not an
/// existing FIFO, device or other non-regular file (checked before any work is done).
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    ballast_balancer::atomic::refuse_special(path).context("--plot")?;
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg" | "png") => {}
        _ => bail!("{}: the plot file must end in .svg or .png", path.display()),
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            bail!(
                "{}: the plot's directory {} does not exist",
                path.display(),
                dir.display()
            )
        }
        _ => Ok(()),
    }
}

/// Per rank: the memory of its cells (metype memory) and of their synapses, from an
/// allocation and the dry run it was made from (gids absent from the dry run count 0).
pub fn allocation_series(title: &str, allocation: &Allocation, d: &DryRun) -> Series {
    let ranks = allocation.ranks as usize;
    let metypes = d.gid_metype_table();
    let mut series = Series {
        title: title.to_owned(),
        cells_kb: vec![0.0; ranks],
        synapses_kb: vec![0.0; ranks],
        transport_kb: vec![0.0; ranks],
    };
    for pop in &allocation.populations {
        let Some(dp) = d.populations.iter().position(|x| x.name == pop.name) else {
            continue;
        };
        for (b, gids) in pop.buckets.iter().filter(|(b, _)| b.rank < allocation.ranks) {
            for &g in gids {
                if let Some(m) = metypes[dp].get(g) {
                    let memory = d.metypes[m].memory_kb;
                    series.cells_kb[b.rank as usize] += memory;
                    series.synapses_kb[b.rank as usize] += d.cell_kb(&d.populations[dp], g, m) - memory;
                }
            }
        }
    }
    series
}

/// Draws `series` (one panel each, ranks on x, MiB on y) for `path` (`.svg` or `.png`),
/// with `lower_bound_kb` (mean rank total) as a horizontal line. Rendered in memory and
/// written unnamed next to `path`; the caller commits it. Errors name the plot file.
pub fn render(path: &Path, series: &[Series], lower_bound_kb: f64) -> anyhow::Result<AtomicFile> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    check_path(path)?;
    let size = (1200u32, 420 * series.len() as u32);
    // plotters lays text out with a registered font, for SVG too.
    let font = FONTS.iter().find_map(|f| std::fs::read(f).ok()).context(
        "plotting needs a TrueType font: install fonts-dejavu-core (apt-get install fonts-dejavu-core)",
    )?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("cannot load the font {:?} for the plot", FONTS))?;
    let what = || format!("cannot write the plot {}", path.display());
    let mut file = AtomicFile::create(path).with_context(what)?;
    if ext == "svg" {
        let mut text = String::new();
        draw(
            &SVGBackend::with_string(&mut text, size).into_drawing_area(),
            series,
            lower_bound_kb,
        )
        .with_context(what)?;
        std::io::Write::write_all(&mut file, text.as_bytes()).with_context(what)?;
    } else {
        let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
        draw(
            &BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area(),
            series,
            lower_bound_kb,
        )
        .with_context(what)?;
        use image::ImageEncoder as _;
        image::codecs::png::PngEncoder::new(std::io::BufWriter::new(&mut file))
            .write_image(&rgb, size.0, size.1, image::ColorType::Rgb8)
            .with_context(what)?;
    }
    Ok(file)
}

/// A chart of one panel: x the rank (bars centred on integers), y MiB.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One panel per series, on one y scale (the tallest bar or the lower bound).
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    series: &[Series],
    lower_bound_kb: f64,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(plot_error::<DB>)?;
    let top = series
        .iter()
        .flat_map(|s| {
            (0..s.cells_kb.len()).map(move |r| s.cells_kb[r] + s.synapses_kb[r] + s.transport_kb[r])
        })
        .fold(lower_bound_kb, f64::max);
    let panels = root.split_evenly((series.len(), 1));
    for (s, area) in series.iter().zip(&panels) {
        panel(area, s, top, lower_bound_kb)?;
    }
    root.present().map_err(plot_error::<DB>)?;
    Ok(())
}

fn plot_error<DB: DrawingBackend>(e: DrawingAreaErrorKind<DB::ErrorType>) -> anyhow::Error
where
    DB::ErrorType: 'static,
{
    anyhow::anyhow!("plotting failed: {e:?}")
}

fn mib(kb: f64) -> f64 {
    kb / 1024.0
}

/// One series' panel: its axes, the stacked bars, the lower bound and the legend.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &Series,
    top: f64,
    lower_bound_kb: f64,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = plot_error::<DB>;
    let ranks = s.cells_kb.len();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{}: memory per rank (MiB)", s.title), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..ranks as f64 - 0.5, 0f64..mib(top) * 1.05)
        .map_err(err)?;
    // Rank r's bar is centred on x = r; only integer ticks are labelled, so a label
    // never repeats whatever tick step plotters picks.
    let rank_label = |x: &f64| {
        if (x - x.round()).abs() < 1e-9 && *x >= 0.0 {
            format!("{}", x.round() as u64)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc("rank")
        .y_desc("MiB")
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_labels(ranks.clamp(2, 20) + 1)
        .x_label_formatter(&rank_label)
        .draw()
        .map_err(err)?;
    stacked_bars(&mut chart, s)?;
    chart
        .draw_series(LineSeries::new(
            [
                (-0.5, mib(lower_bound_kb)),
                (ranks as f64 - 0.5, mib(lower_bound_kb)),
            ],
            BLACK.stroke_width(2),
        ))
        .map_err(err)?
        .label("lower bound: (cells + synapses) / ranks")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 10, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Cells, synapses and transport stacked per rank, each with its legend entry.
fn stacked_bars<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, s: &Series) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let ranks = s.cells_kb.len();
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
                Rectangle::new([(r as f64 - 0.4, y0), (r as f64 + 0.4, y1)], color.filled())
            })
            .collect();
        for r in 0..ranks {
            base[r] += values[r];
        }
        chart
            .draw_series(bars)
            .map_err(plot_error::<DB>)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    Ok(())
}
