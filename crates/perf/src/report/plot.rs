//! Line charts of a report table with plotters: SVG always (text is rendered by the viewer,
//! so no fonts are needed), PNG when a TrueType font is found on the machine (plotters'
//! pure-Rust ab_glyph renderer needs the font bytes; Debian's fonts-dejavu-core provides one).
//! With two brokers a metric keeps one color: solid for the first broker, dashed for the
//! compared one, whose ratio the first broker's legend entry carries. Each axis is linear or
//! log and labels its ticks as `axis` decides from the values drawn.

use super::axis::Axis;
use super::{PlotSpec, Row, Table};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

pub struct PlotFiles {
    pub svg: String,
    pub png: Option<String>,
}

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a system font for the bitmap backend once; false when none exists.
fn font_available() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        for path in FONT_CANDIDATES {
            if let Ok(bytes) = std::fs::read(path) {
                // plotters wants 'static font data; one leaked font per process is fine.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line: its legend, its points, its color slot (the metric's place in the plot, so a
/// metric has one color for both brokers) and whether it is dashed (the compared broker).
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
    color_slot: usize,
    dashed: bool,
}

type Series = Vec<Line>;

fn series(spec: &PlotSpec, table: &Table, brokers: &[String]) -> Series {
    let mut out = vec![];
    let shown = |r: &Row| spec.x_max.is_none_or(|max| r.x <= max);
    for (b, broker) in brokers.iter().enumerate() {
        for (slot, &m) in spec.metric_indexes.iter().enumerate() {
            let Some(metric) = table.metrics.get(m) else {
                continue;
            };
            let name = match brokers {
                [_] => metric.name.clone(),
                // The first broker's line carries the ratio over the points drawn.
                [_, other] if b == 0 => match table.spread(m, shown) {
                    Some(spread) => format!(
                        "{} ({broker}: {} better than {other}, {})",
                        metric.name,
                        spread.range(),
                        metric.better.phrase()
                    ),
                    None => format!("{} ({broker})", metric.name),
                },
                _ => format!("{} ({broker})", metric.name),
            };
            let points = table
                .rows
                .iter()
                .filter(|r| shown(r))
                .filter_map(|r| Some((r.x, r.values.get(b)?.get(m).copied().flatten()?)))
                .collect();
            out.push(Line {
                name,
                points,
                color_slot: slot,
                dashed: b > 0,
            });
        }
    }
    out
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    spec: &PlotSpec,
    data: &Series,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let xs: Vec<f64> = data
        .iter()
        .flat_map(|l| l.points.iter().map(|(x, _)| *x))
        .collect();
    let ys: Vec<f64> = data
        .iter()
        .flat_map(|l| l.points.iter().map(|(_, y)| *y))
        .collect();
    let (Some(x_axis), Some(y_axis)) = (Axis::for_values(&xs, false), Axis::for_values(&ys, true))
    else {
        return Ok(());
    };
    // The axis names say when they are log scales: a reader of a straight line needs to know.
    let describe = |name: &str, axis: &Axis| {
        if axis.log {
            format!("{name} (log scale)")
        } else {
            name.to_owned()
        }
    };
    let (x_desc, y_desc) = (
        describe(&spec.x_label, &x_axis),
        describe(&spec.y_label, &y_axis),
    );
    let colors = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    macro_rules! draw_with {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc.as_str())
                .y_desc(y_desc.as_str())
                .x_label_formatter(&|v| x_axis.tick_label(*v))
                .y_label_formatter(&|v| y_axis.tick_label(*v))
                .draw()
                .map_err(err)?;
            for line in data {
                let color = colors[line.color_slot % colors.len()];
                let points = &line.points;
                if line.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(
                            points.iter().cloned(),
                            8,
                            5,
                            color.stroke_width(2),
                        ))
                        .map_err(err)?
                        .label(line.name.as_str())
                        .legend(move |(x, y)| {
                            DashedPathElement::new(
                                vec![(x, y), (x + 20, y)],
                                6,
                                3,
                                color.stroke_width(2),
                            )
                        });
                } else {
                    chart
                        .draw_series(LineSeries::new(
                            points.iter().cloned(),
                            color.stroke_width(2),
                        ))
                        .map_err(err)?
                        .label(line.name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                }
                chart
                    .draw_series(
                        points
                            .iter()
                            .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                    )
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }};
    }
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(spec.title.as_str(), ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70);
    let (xr, yr) = (x_axis.low..x_axis.high, y_axis.low..y_axis.high);
    match (x_axis.log, y_axis.log) {
        (false, false) => draw_with!(builder.build_cartesian_2d(xr, yr).map_err(err)?),
        (true, false) => draw_with!(builder
            .build_cartesian_2d(xr.log_scale(), yr)
            .map_err(err)?),
        (false, true) => draw_with!(builder
            .build_cartesian_2d(xr, yr.log_scale())
            .map_err(err)?),
        (true, true) => draw_with!(builder
            .build_cartesian_2d(xr.log_scale(), yr.log_scale())
            .map_err(err)?),
    }
    root.present().map_err(err)?;
    Ok(())
}

pub fn draw(
    dir: &Path,
    spec: &PlotSpec,
    table: &Table,
    brokers: &[String],
) -> anyhow::Result<PlotFiles> {
    if !font_available() {
        // plotters measures text with the registered font, for SVG too.
        anyhow::bail!("no TrueType font found (install fonts-dejavu-core)");
    }
    let data = series(spec, table, brokers);
    let svg_name = format!("{}.svg", spec.file_stem);
    render(
        SVGBackend::new(&dir.join(&svg_name), (900, 540)).into_drawing_area(),
        spec,
        &data,
    )?;
    let png_name = format!("{}.png", spec.file_stem);
    render(
        BitMapBackend::new(&dir.join(&png_name), (900, 540)).into_drawing_area(),
        spec,
        &data,
    )?;
    Ok(PlotFiles {
        svg: svg_name,
        png: Some(png_name),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Metric, Table, Unit};
    use super::*;

    #[test]
    fn writes_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("warren-perf-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Table::new(
            &["Rate"],
            &[
                Metric::lower("Max 99th", Unit::Ms),
                Metric::lower("Max 95th", Unit::Ms),
            ],
        );
        for (i, r) in [100.0, 1000.0, 10000.0].iter().enumerate() {
            t.push(
                vec![format!("{r}")],
                *r,
                vec![vec![Some(i as f64 + 1.0), Some(0.5)]],
            );
        }
        let spec = PlotSpec {
            file_stem: "test".into(),
            title: "latency".into(),
            x_label: "msg/s".into(),
            y_label: "ms".into(),
            metric_indexes: vec![0, 1],
            x_max: None,
        };
        let Ok(files) = draw(&dir, &spec, &t, &["warren".into()]) else {
            assert!(!font_available(), "drawing failed although a font exists");
            return;
        };
        let svg = std::fs::read_to_string(dir.join(&files.svg)).unwrap();
        assert!(svg.contains("<svg") && svg.contains("Max 99th"));
        if let Some(png) = files.png {
            assert!(std::fs::metadata(dir.join(png)).unwrap().len() > 1000);
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn x_max_leaves_out_the_larger_rows() {
        let mut t = Table::new(&["N"], &[Metric::lower("Mean", Unit::Ms)]);
        for n in [1000.0, 9000.0, 9500.0, 10000.0] {
            t.push(vec![format!("{n}")], n, vec![vec![Some(n / 1000.0)]]);
        }
        let mut spec = PlotSpec {
            file_stem: "test".into(),
            title: "latency".into(),
            x_label: "N".into(),
            y_label: "ms".into(),
            metric_indexes: vec![0],
            x_max: Some(9000.0),
        };
        let xs = |spec: &PlotSpec| -> Vec<f64> {
            series(spec, &t, &["warren".into()])[0]
                .points
                .iter()
                .map(|p| p.0)
                .collect()
        };
        assert_eq!(xs(&spec), vec![1000.0, 9000.0]);
        spec.x_max = None;
        assert_eq!(xs(&spec).len(), 4);
    }

    #[test]
    fn legend_carries_both_brokers_and_the_ratio() {
        let mut t = Table::new(
            &["Rate"],
            &[
                Metric::lower("Max 99th", Unit::Ms),
                Metric::higher("Msg/s", Unit::Count),
            ],
        );
        for (rate, warren, rabbit) in [(100.0, 1.0, 4.0), (1000.0, 1.0, 2.0)] {
            t.push(
                vec![format!("{rate}")],
                rate,
                vec![
                    vec![Some(warren), Some(rate)],
                    vec![Some(rabbit), Some(rate / 8.0)],
                ],
            );
        }
        let spec = PlotSpec {
            file_stem: "test".into(),
            title: "t".into(),
            x_label: "msg/s".into(),
            y_label: "ms".into(),
            metric_indexes: vec![0, 1],
            x_max: None,
        };
        let names: Vec<String> = series(&spec, &t, &["warren".into(), "rabbitmq".into()])
            .into_iter()
            .map(|line| line.name)
            .collect();
        assert_eq!(
            names,
            [
                "Max 99th (warren: 2.00×–4.00× (median 3.00×) better than rabbitmq, lower is better)",
                "Msg/s (warren: 8.00× better than rabbitmq, higher is better)",
                "Max 99th (rabbitmq)",
                "Msg/s (rabbitmq)",
            ]
        );
        // Leaving out the row at 1000 msg/s leaves one ratio, 4.
        let first = PlotSpec {
            x_max: Some(100.0),
            ..spec
        };
        let legend = &series(&first, &t, &["warren".into(), "rabbitmq".into()])[0].name;
        assert!(legend.contains("warren: 4.00× better"), "{legend}");
    }

    /// docs/reports/many-pairs.md's figures (N 1,000 and 2,000): Warren's 3 ms beside
    /// RabbitMQ's 922 ms were drawn flat on zero, with x ticks "1100.0"; on a log y axis with
    /// whole-number ticks both brokers' lines read.
    #[test]
    fn many_pairs_figures_draw_on_a_log_y_with_whole_ticks() {
        let mut t = Table::new(
            &["N"],
            &[
                Metric::lower("Mean", Unit::Ms),
                Metric::lower("99th", Unit::Ms),
            ],
        );
        t.push(
            vec!["1000".into()],
            1000.0,
            vec![
                vec![Some(3.02), Some(10.72)],
                vec![Some(474.0), Some(922.0)],
            ],
        );
        t.push(
            vec!["2000".into()],
            2000.0,
            vec![
                vec![Some(37.81), Some(170.0)],
                vec![Some(9082.0), Some(18317.0)],
            ],
        );
        let spec = PlotSpec {
            file_stem: "many_pairs_latency".into(),
            title: "mean and 99th percentile flight time, every N".into(),
            x_label: "N (senders)".into(),
            y_label: "ms".into(),
            metric_indexes: vec![0, 1],
            x_max: None,
        };
        let dir = std::env::temp_dir().join(format!("warren-perf-axes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let Ok(files) = draw(&dir, &spec, &t, &["warren".into(), "rabbitmq".into()]) else {
            assert!(!font_available(), "drawing failed although a font exists");
            return;
        };
        let svg = std::fs::read_to_string(dir.join(&files.svg)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // The SVG's text elements, trimmed: axis names, tick labels, legend.
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect();
        assert!(texts.contains(&"ms (log scale)"), "y is log: {texts:?}");
        assert!(
            texts.contains(&"N (senders)"),
            "x spans 2x: linear: {texts:?}"
        );
        for tick in ["10", "100", "1000", "1100", "2000"] {
            assert!(texts.contains(&tick), "{tick}: {texts:?}");
        }
        assert!(!texts.iter().any(|t| t.ends_with(".0")), "{texts:?}");
    }
}
