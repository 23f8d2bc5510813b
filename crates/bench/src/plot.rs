//! Line plots as standalone SVG: a grid of panels, one line per series, a legend and a
//! caption — enough for EASYIO Fig. 10-style throughput-against-threads figures.

use std::fmt::Write;

/// Size of one panel and the space around its axes, in SVG user units (pixels).
const PANEL_W: f64 = 340.0;
const PANEL_H: f64 = 240.0;
const MARGIN_L: f64 = 62.0;
const MARGIN_R: f64 = 16.0;
const MARGIN_T: f64 = 30.0;
const MARGIN_B: f64 = 42.0;
/// Panels per row of the grid.
const COLUMNS: usize = 2;
/// Heights of the title band, of each caption line and of the legend band.
const TITLE_H: f64 = 34.0;
const LINE_H: f64 = 16.0;
const LEGEND_H: f64 = 28.0;
/// Average width of a caption character, to wrap the caption to the figure's width.
const CAPTION_CHAR_W: f64 = 6.0;
/// Ticks on the y axis.
const Y_TICKS: usize = 5;
/// Line colours, one per series in order (colour-blind-safe palette).
const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// One line: (x, y) points, drawn in x order.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart of the grid.
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

fn tick_label(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The whole figure. Series with the same name share a colour across panels; the
/// legend lists each name once.
pub fn svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    caption: &[String],
    panels: &[Panel],
) -> String {
    let mut names: Vec<&str> = Vec::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    let colour = |name: &str| {
        let i = names.iter().position(|n| *n == name).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    };
    let rows = panels.len().div_ceil(COLUMNS).max(1);
    let cols = panels.len().clamp(1, COLUMNS);
    let width = cols as f64 * PANEL_W;
    let caption: Vec<String> = caption
        .iter()
        .flat_map(|l| wrap(l, ((width - 20.0) / CAPTION_CHAR_W) as usize))
        .collect();
    let grid_top = TITLE_H + LEGEND_H;
    let height = grid_top + rows as f64 * PANEL_H + caption.len() as f64 * LINE_H + 10.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" font-size="15" font-weight="bold" text-anchor="middle">{}</text>"#,
        width / 2.0,
        esc(title)
    );
    // Legend.
    let step = width / (names.len().max(1) as f64);
    for (i, name) in names.iter().enumerate() {
        let x = i as f64 * step + 16.0;
        let y = TITLE_H + 12.0;
        let _ = writeln!(
            o,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2.5"/><circle cx="{}" cy="{y}" r="3" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            x + 22.0,
            colour(name),
            x + 11.0,
            colour(name),
            x + 27.0,
            y + 4.0,
            esc(name)
        );
    }
    for (pi, panel) in panels.iter().enumerate() {
        let ox = (pi % COLUMNS) as f64 * PANEL_W;
        let oy = grid_top + (pi / COLUMNS) as f64 * PANEL_H;
        let (x0, x1) = (ox + MARGIN_L, ox + PANEL_W - MARGIN_R);
        let (y0, y1) = (oy + PANEL_H - MARGIN_B, oy + MARGIN_T);
        let pts = panel.series.iter().flat_map(|s| &s.points);
        let xmin = pts.clone().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let xmax = pts.clone().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        let ytop = nice_top(pts.map(|p| p.1).fold(0.0, f64::max));
        let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
            (xmin, xmax)
        } else {
            (xmin.min(1.0) - 0.5, xmin.max(1.0) + 0.5)
        };
        let sx = |x: f64| x0 + (x - xmin) / (xmax - xmin) * (x1 - x0);
        let sy = |y: f64| y0 - y / ytop * (y0 - y1);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" font-size="13" font-weight="bold" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            oy + 18.0,
            esc(&panel.title)
        );
        for t in 0..=Y_TICKS {
            let v = ytop * t as f64 / Y_TICKS as f64;
            let y = sy(v);
            let _ = writeln!(
                o,
                r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#e3e3e3"/><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"##,
                x0 - 4.0,
                y + 3.5,
                tick_label(v)
            );
        }
        let mut xs: Vec<f64> = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>"#,
                sx(x),
                y0 + 14.0,
                tick_label(x)
            );
        }
        let _ = writeln!(
            o,
            r#"<polyline points="{x0},{y1} {x0},{y0} {x1},{y0}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            y0 + 30.0,
            esc(x_label)
        );
        let (lx, ly) = (ox + 14.0, (y0 + y1) / 2.0);
        let _ = writeln!(
            o,
            r#"<text x="{lx}" y="{ly}" font-size="11" text-anchor="middle" transform="rotate(-90 {lx} {ly})">{}</text>"#,
            esc(y_label)
        );
        for s in &panel.series {
            let mut p = s.points.clone();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = p
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            let c = colour(&s.name);
            let _ = writeln!(
                o,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for &(x, y) in &p {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"><title>{}: {}</title></circle>"#,
                    sx(x),
                    sy(y),
                    esc(&s.name),
                    tick_label(y)
                );
            }
        }
    }
    let cap_y = grid_top + rows as f64 * PANEL_H;
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(
            o,
            r##"<text x="10" y="{}" font-size="11" fill="#333">{}</text>"##,
            cap_y + (i as f64 + 0.8) * LINE_H,
            esc(line)
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_tops_are_round_and_cover_the_maximum() {
        assert_eq!(nice_top(0.0), 1.0);
        assert_eq!(nice_top(7.3), 10.0);
        assert_eq!(nice_top(180.0), 200.0);
        assert_eq!(nice_top(2.2), 2.5);
    }

    #[test]
    fn the_svg_has_a_line_per_series_and_escapes_text() {
        let panels = [Panel {
            title: "a<b".into(),
            series: vec![
                Series {
                    name: "cpu".into(),
                    points: vec![(1.0, 10.0), (2.0, 18.0)],
                },
                Series {
                    name: "async".into(),
                    points: vec![(1.0, 12.0), (2.0, 25.0)],
                },
            ],
        }];
        let s = svg("t", "threads", "tasks/s", &["cap & more".into()], &panels);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("stroke-width=\"2\"").count(), 2);
        assert!(s.contains("a&lt;b") && s.contains("cap &amp; more"));
    }

    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("toolongword x", 4), ["toolongword", "x"]);
    }
}
