//! `reverb info --config`: the binary lists every registered variable, shows what the
//! environment sets, hides secrets and flags values that do not parse.

use std::process::Command;

use reverb_transport::config::registry::VARS;

fn info(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_reverb"))
        .arg("info")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running reverb info");
    assert!(out.status.success(), "reverb info {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn json_lists_every_variable_with_its_current_value() {
    let env = [("REVERB_LOG", "causal"), ("REVERB_JOB_TOKEN", "s3cret"), ("REVERB_DETECT_MS", "1m")];
    let text = info(&["--config", "--json"], &env);
    assert!(!text.contains("s3cret"), "the job token leaked");
    let vars: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let vars = vars.as_array().expect("an array");
    assert_eq!(vars.len(), VARS.len());
    let find = |name: &str| vars.iter().find(|v| v["name"] == name).cloned().unwrap_or_default();
    assert_eq!(find("REVERB_LOG")["current"], "causal");
    assert_eq!(find("REVERB_LOG")["valid"], true);
    assert_eq!(find("REVERB_DETECT_MS")["valid"], false);
    assert_eq!(find("REVERB_PROVIDER")["default"], "auto");
}

/// The text form is for people and shells: a `NAME=value` line per variable, and a bad value
/// flagged on the line after it. What is valid is the JSON's verdict (checked first).
#[test]
fn text_shows_values_and_flags_bad_ones() {
    let env = [("REVERB_RNDV_THRESH", "64K"), ("REVERB_WAIT_MODE", "nap")];
    let vars: serde_json::Value =
        serde_json::from_str(&info(&["--config", "--json"], &env)).expect("valid JSON");
    let find = |name: &str| {
        vars.as_array().into_iter().flatten().find(|v| v["name"] == name).cloned().unwrap_or_default()
    };
    assert_eq!(
        (&find("REVERB_RNDV_THRESH")["current"], &find("REVERB_RNDV_THRESH")["valid"]),
        (&"64K".into(), &true.into())
    );
    assert_eq!(
        (&find("REVERB_WAIT_MODE")["current"], &find("REVERB_WAIT_MODE")["valid"]),
        (&"nap".into(), &false.into())
    );
    let text = info(&["--config"], &env);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"REVERB_RNDV_THRESH=64K"), "{text}");
    let at = lines.iter().position(|l| *l == "REVERB_WAIT_MODE=nap").expect("the value line");
    assert!(lines.get(at + 1).is_some_and(|l| l.starts_with("# ^ INVALID")), "not flagged:\n{text}");
}
