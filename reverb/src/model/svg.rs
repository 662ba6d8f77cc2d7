//! A tiny hand-written SVG line-plot writer (no plotting crate: a plot is just text).

use std::fmt::Write as _;

/// One named line of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self { name: name.into(), points }
    }
}

#[derive(Debug, Clone)]
pub struct LinePlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Log-2 x axis (socket and node counts double from point to point).
    pub x_log2: bool,
    /// Log-10 y axis.
    pub y_log10: bool,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PLOT_H: f64 = HEIGHT - TOP - BOTTOM;
const COLOURS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

impl LinePlot {
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log2: false,
            y_log10: false,
            series: Vec::new(),
        }
    }

    pub fn log2_x(mut self) -> Self {
        self.x_log2 = true;
        self
    }

    pub fn log10_y(mut self) -> Self {
        self.y_log10 = true;
        self
    }

    pub fn add(&mut self, series: Series) {
        self.series.push(series);
    }

    fn tx(&self, x: f64) -> f64 {
        if self.x_log2 {
            x.log2()
        } else {
            x
        }
    }

    fn ty(&self, y: f64) -> f64 {
        if self.y_log10 {
            y.log10()
        } else {
            y
        }
    }

    /// Whether a raw point can be drawn on these axes.
    fn usable(&self, x: f64, y: f64) -> bool {
        x.is_finite() && y.is_finite() && (!self.x_log2 || x > 0.0) && (!self.y_log10 || y > 0.0)
    }

    /// The axes' ranges and ticks (in transformed units) that hold every usable point.
    fn frame(&self) -> Frame {
        let points: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|&(x, y)| self.usable(x, y))
            .map(|(x, y)| (self.tx(x), self.ty(y)))
            .collect();
        let (mut x0, mut x1, mut y0, mut y1) = points.iter().fold(
            (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY),
            |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
        );
        if points.is_empty() {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if x1 - x0 < 1e-12 {
            x1 = x0 + 1.0;
        }
        let y_ticks;
        if self.y_log10 {
            y0 = y0.floor();
            y1 = y1.ceil().max(y0 + 1.0);
            y_ticks = (y0 as i32..=y1 as i32).map(f64::from).collect::<Vec<_>>();
        } else {
            if y1 - y0 < 1e-12 {
                y1 = y0 + 1.0;
            }
            let step = nice_step((y1 - y0) / 6.0);
            y0 = (y0 / step).floor() * step;
            y1 = (y1 / step).ceil() * step;
            let count = ((y1 - y0) / step).round() as i32;
            y_ticks = (0..=count).map(|i| y0 + f64::from(i) * step).collect();
        }
        let x_ticks: Vec<f64> = if self.x_log2 {
            (x0.floor() as i32..=x1.ceil() as i32)
                .map(f64::from)
                .filter(|t| *t >= x0 - 1e-9 && *t <= x1 + 1e-9)
                .collect()
        } else {
            let step = nice_step((x1 - x0) / 6.0);
            let first = (x0 / step).ceil() as i64;
            let last = (x1 / step).floor() as i64;
            (first..=last).map(|i| i as f64 * step).collect()
        };
        Frame { x0, x1, y0, y1, x_ticks, y_ticks }
    }

    /// Render to an SVG document. Non-finite points (and non-positive ones on log axes) are
    /// skipped, which breaks the line there.
    pub fn render(&self) -> String {
        let frame = self.frame();
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            LEFT + PLOT_W / 2.0,
            escape(&self.title)
        );
        self.write_axes(&mut svg, &frame);
        for (i, series) in self.series.iter().enumerate() {
            self.write_series(&mut svg, &frame, i, series);
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Grid lines, tick labels, the plot border and the axis labels.
    fn write_axes(&self, svg: &mut String, frame: &Frame) {
        for &t in &frame.y_ticks {
            let y = frame.py(t);
            let label = if self.y_log10 { format!("1e{}", t as i32) } else { tick_label(t) };
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                LEFT + PLOT_W
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
                LEFT - 6.0,
                y + 4.0
            );
        }
        for &t in &frame.x_ticks {
            let x = frame.px(t);
            let label = if self.x_log2 { count_label(2f64.powf(t)) } else { tick_label(t) };
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
                TOP + PLOT_H
            );
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
                TOP + PLOT_H + 18.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + PLOT_W / 2.0,
            HEIGHT - 15.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            TOP + PLOT_H / 2.0,
            TOP + PLOT_H / 2.0,
            escape(&self.y_label)
        );
    }

    /// Series `i`: its polylines (broken at unusable points), markers and legend entry.
    fn write_series(&self, svg: &mut String, frame: &Frame, i: usize, series: &Series) {
        let colour = COLOURS[i % COLOURS.len()];
        let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &series.points {
            if self.usable(x, y) {
                if let Some(last) = segments.last_mut() {
                    last.push((frame.px(self.tx(x)), frame.py(self.ty(y))));
                }
            } else if segments.last().is_some_and(|s| !s.is_empty()) {
                segments.push(Vec::new());
            }
        }
        for segment in segments.iter().filter(|s| !s.is_empty()) {
            let path: Vec<String> = segment.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for (x, y) in segment {
                let _ = writeln!(svg, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#);
            }
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + PLOT_W + 14.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&series.name)
        );
    }
}

/// The plotted ranges (transformed units) and tick positions.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    x_ticks: Vec<f64>,
    y_ticks: Vec<f64>,
}

impl Frame {
    /// Pixel column of transformed `x`.
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0) * PLOT_W
    }

    /// Pixel row of transformed `y` (up is larger).
    fn py(&self, y: f64) -> f64 {
        TOP + PLOT_H - (y - self.y0) / (self.y1 - self.y0) * PLOT_H
    }
}

fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let base = 10f64.powf(raw.log10().floor());
    let fraction = raw / base;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * base
}

fn tick_label(value: f64) -> String {
    let text = format!("{value:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// 65536 -> "64K", 1048576 -> "1M".
fn count_label(value: f64) -> String {
    let v = value.round() as u64;
    if v >= 1 << 20 && v.trailing_zeros() >= 20 {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v.trailing_zeros() >= 10 {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_series_and_labels() {
        let mut plot = LinePlot::new("Efficiency <test>", "sockets", "W/T").log2_x();
        plot.add(Series::new("C/R", vec![(16384.0, 0.8), (32768.0, 0.7), (65536.0, f64::NAN)]));
        let svg = plot.render();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Efficiency &lt;test&gt;"));
        assert!(svg.contains("16K") && svg.contains("32K"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    #[test]
    fn empty_plot_does_not_panic() {
        let svg = LinePlot::new("empty", "x", "y").log10_y().render();
        assert!(svg.contains("</svg>"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(count_label(1048576.0), "1M");
    }
}
