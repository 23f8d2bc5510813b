//! Line plots as standalone SVG, drawn with `plotters`: a title, one legend for the
//! whole figure, a grid of panels with one line per series, and a caption — enough for
//! EASYIO Fig. 10-style throughput-against-threads figures and Fig. 12's series over
//! time.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Space around a panel's axes, in SVG user units (pixels).
const MARGIN: u32 = 16;
const X_LABEL_AREA: u32 = 40;
const Y_LABEL_AREA: u32 = 62;
/// Heights of the title band, of each caption line and of the legend band.
const TITLE_H: u32 = 34;
const LINE_H: u32 = 16;
const LEGEND_H: u32 = 28;
/// Average width of a caption character, to wrap the caption to the figure's width.
const CAPTION_CHAR_W: u32 = 6;
/// Ticks on the y axis.
const Y_TICKS: usize = 6;
/// Font of every text.
const FONT: &str = "sans-serif";
/// Line colours, one per series name in order of appearance (colour-blind-safe).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xF0, 0xE4, 0x42),
];
/// Colour of a panel's mark (a target or a limit).
const MARK: RGBColor = RGBColor(0x2C, 0xA0, 0x2C);

/// One line: (x, y) points, drawn in x order.
pub struct Series {
    /// Name in the legend; series of the same name share a colour across panels.
    pub name: String,
    /// The points, in any order.
    pub points: Vec<(f64, f64)>,
    /// Whether each point gets a dot (few points) or the line is drawn alone.
    pub dots: bool,
}

/// A horizontal dashed line across a panel, with its label (a target, a limit).
pub struct Mark {
    /// Where, on the y axis.
    pub y: f64,
    /// What it is.
    pub label: String,
}

/// One chart of the grid.
pub struct Panel {
    /// Title above the chart.
    pub title: String,
    /// The y axis: what and in which unit.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// A horizontal mark, if any.
    pub mark: Option<Mark>,
    /// Top of the y axis; values above it are drawn at the top edge. Default: a round
    /// number at or above the largest value.
    pub y_top: Option<f64>,
}

/// A whole figure.
pub struct Figure {
    /// Title at the top.
    pub title: String,
    /// The x axis of every panel: what and in which unit.
    pub x_label: String,
    /// Lines under the grid (wrapped to the figure's width).
    pub caption: Vec<String>,
    /// Panels per row of the grid.
    pub columns: usize,
    /// Size of one panel, pixels.
    pub panel_size: (u32, u32),
    /// The charts, row by row.
    pub panels: Vec<Panel>,
}

/// Splits `text` at spaces into lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// A round number at or above `max` for the top of an axis.
fn nice_top(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&t| t >= max)
        .unwrap_or(10.0 * mag)
}

/// An axis label: whole numbers without decimals, small ones with one.
fn tick_label(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The series names of the figure, each once, in order of appearance.
fn names(fig: &Figure) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for s in fig.panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    names
}

/// The colour of the series called `name`.
fn colour(names: &[&str], name: &str) -> RGBColor {
    let i = names.iter().position(|n| *n == name).unwrap_or(0);
    COLOURS[i % COLOURS.len()]
}

/// The figure as an SVG document.
pub fn svg(fig: &Figure) -> anyhow::Result<String> {
    let names = names(fig);
    let columns = fig.columns.max(1);
    let rows = fig.panels.len().div_ceil(columns).max(1);
    let cols = fig.panels.len().clamp(1, columns);
    let (panel_w, panel_h) = fig.panel_size;
    let width = cols as u32 * panel_w;
    let wrap_at = (width.saturating_sub(20) / CAPTION_CHAR_W) as usize;
    let caption: Vec<String> = fig.caption.iter().flat_map(|l| wrap(l, wrap_at)).collect();
    let grid_h = rows as u32 * panel_h;
    let height = TITLE_H + LEGEND_H + grid_h + caption.len() as u32 * LINE_H + 10;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, rest) = root.split_vertically(TITLE_H);
        top.draw(&Text::new(
            fig.title.as_str(),
            (width as i32 / 2, 10),
            TextStyle::from((FONT, 19).into_font().style(FontStyle::Bold))
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
        let (legend, rest) = rest.split_vertically(LEGEND_H);
        draw_legend(&legend, &names, width)?;
        let (grid, bottom) = rest.split_vertically(grid_h);
        let areas = grid.split_evenly((rows, cols));
        for (panel, area) in fig.panels.iter().zip(&areas) {
            draw_panel(area, panel, &fig.x_label, &names)?;
        }
        for (i, line) in caption.iter().enumerate() {
            let y = (i as u32 * LINE_H + LINE_H / 4) as i32;
            bottom.draw(&Text::new(
                line.as_str(),
                (10, y),
                (FONT, 14).into_font().color(&RGBColor(0x33, 0x33, 0x33)),
            ))?;
        }
        root.present()?;
    }
    Ok(out)
}

/// One entry per series name, spread across the figure's width.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    names: &[&str],
    width: u32,
) -> anyhow::Result<()> {
    let step = width as i32 / names.len().max(1) as i32;
    for (i, name) in names.iter().enumerate() {
        let (x, y) = (i as i32 * step + 16, 12);
        let c = colour(names, name);
        area.draw(&PathElement::new(
            vec![(x, y), (x + 22, y)],
            c.stroke_width(3),
        ))?;
        area.draw(&Circle::new((x + 11, y), 3, c.filled()))?;
        area.draw(&Text::new(
            *name,
            (x + 27, y),
            TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// The x range of a panel: its points' span, or one unit around a single x.
fn x_range(panel: &Panel) -> (f64, f64) {
    let xs = || {
        panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
    };
    let lo = xs().fold(f64::INFINITY, f64::min);
    let hi = xs().fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (lo.min(1.0) - 0.5, lo.max(1.0) + 0.5)
    }
}

/// One chart: axes with their labels, the mark, a line per series.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    x_label: &str,
    names: &[&str],
) -> anyhow::Result<()> {
    let (x0, x1) = x_range(panel);
    let y_max = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(panel.mark.as_ref().map(|m| m.y))
        .fold(0.0, f64::max);
    let top = panel.y_top.unwrap_or_else(|| nice_top(y_max));
    let mut chart = ChartBuilder::on(area)
        .caption(
            panel.title.as_str(),
            (FONT, 16).into_font().style(FontStyle::Bold),
        )
        .margin(MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(x0..x1, 0.0..top)?;
    let distinct_x = {
        let mut xs: Vec<f64> = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs.len()
    };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(panel.y_label.as_str())
        .x_labels(distinct_x.clamp(2, 6))
        .y_labels(Y_TICKS)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(RGBColor(0xE3, 0xE3, 0xE3))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 14))
        .draw()?;
    if let Some(mark) = &panel.mark {
        chart.draw_series(DashedLineSeries::new(
            [(x0, mark.y), (x1, mark.y)],
            4,
            3,
            MARK.stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            mark.label.clone(),
            (x1, mark.y.min(top)),
            (FONT, 14)
                .into_font()
                .color(&MARK)
                .pos(Pos::new(HPos::Right, VPos::Bottom)),
        )))?;
    }
    for s in &panel.series {
        let mut points = s.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = colour(names, &s.name);
        let line: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x, y.min(top))).collect();
        chart.draw_series(LineSeries::new(line.iter().copied(), c.stroke_width(2)))?;
        if s.dots {
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace of an SVG document's root element.
    const SVG_NS: &str = "xmlns=\"http://www.w3.org/2000/svg\"";

    /// Whether the SVG has a text element saying exactly `text`.
    fn has_text(svg: &str, text: &str) -> bool {
        svg.contains(&format!("\n{text}\n</text>"))
    }

    fn figure() -> Figure {
        Figure {
            title: "t".into(),
            x_label: "threads".into(),
            caption: vec!["cap & more".into()],
            columns: 2,
            panel_size: (340, 240),
            panels: vec![Panel {
                title: "a<b".into(),
                y_label: "tasks/s".into(),
                series: vec![
                    Series {
                        name: "cpu".into(),
                        points: vec![(1.0, 10.0), (2.0, 18.0)],
                        dots: true,
                    },
                    Series {
                        name: "async".into(),
                        points: vec![(2.0, 25.0), (1.0, 12.0)],
                        dots: true,
                    },
                ],
                mark: Some(Mark {
                    y: 20.0,
                    label: "target".into(),
                }),
                y_top: None,
            }],
        }
    }

    #[test]
    fn nice_tops_are_round_and_cover_the_maximum() {
        assert_eq!(nice_top(0.0), 1.0);
        assert_eq!(nice_top(7.3), 10.0);
        assert_eq!(nice_top(180.0), 200.0);
        assert_eq!(nice_top(2.2), 2.5);
    }

    #[test]
    fn the_svg_has_a_line_per_series_labelled_axes_and_escaped_text() {
        let s = svg(&figure()).unwrap();
        assert!(
            s.contains(SVG_NS) && s.trim_end().ends_with("</svg>"),
            "{s}"
        );
        // Each series is one polyline in its colour, with a dot per point.
        for c in ["#0072B2", "#D55E00"] {
            let line = s
                .lines()
                .filter(|l| l.contains("<polyline") && l.contains(c))
                .filter(|l| l.contains("stroke-width=\"2\""))
                .count();
            assert_eq!(line, 1, "{c}: {s}");
            let dots = s
                .lines()
                .filter(|l| l.contains("<circle") && l.contains(c))
                .count();
            assert_eq!(dots, 2 + 1, "{c}: two points and the legend's dot");
        }
        for text in ["threads", "tasks/s", "cpu", "async", "target"] {
            assert!(has_text(&s, text), "{text}: {s}");
        }
        assert!(s.contains("a&lt;b") && s.contains("cap &amp; more"), "{s}");
    }

    #[test]
    fn values_above_the_top_are_drawn_at_the_edge() {
        let mut fig = figure();
        fig.panels[0].y_top = Some(15.0);
        let capped = svg(&fig).unwrap();
        fig.panels[0].y_top = Some(1000.0);
        let roomy = svg(&fig).unwrap();
        assert_ne!(capped, roomy);
        assert!(has_text(&capped, "15"), "the top tick is the cap");
    }

    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("toolongword x", 4), ["toolongword", "x"]);
    }
}
