//! Where the chat template comes from: the operator's `--chat-template` (or `model.chat_template`)
//! when set, else the model's own. A request can never supply one.

use std::path::PathBuf;

/// The operator's template could not be used. The messages name the path: they go to the
/// operator at startup, never to a client.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateSourceError {
    #[error(
        "--chat-template {path:?} looks like a file path but cannot be read: {source} \
         (an inline template must contain '{{', '}}' or a newline)"
    )]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--chat-template {path:?}: the file is not UTF-8")]
    NotUtf8 { path: PathBuf },
    #[error("--chat-template: the template is empty")]
    Empty,
}

/// Resolves `--chat-template`'s argument as vLLM does: the contents of the file it names,
/// or, when no file can be read and the argument contains `{`, `}` or a newline, the
/// argument itself as an inline template. Unlike vLLM, an inline template is used verbatim
/// (vLLM first decodes Python escapes such as `\n`; Jinja string literals decode their own).
pub fn resolve_chat_template_arg(arg: &str) -> Result<String, ChatTemplateSourceError> {
    let text = match std::fs::read(arg) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| ChatTemplateSourceError::NotUtf8 { path: arg.into() })?,
        Err(_) if arg.contains(['{', '}', '\n']) => arg.to_owned(),
        Err(source) => {
            return Err(ChatTemplateSourceError::Unreadable {
                path: arg.into(),
                source,
            });
        }
    };
    if text.trim().is_empty() {
        return Err(ChatTemplateSourceError::Empty);
    }
    Ok(text)
}

/// The template to compile: the operator's override when set, else the model's, else ChatML.
pub fn choose_chat_template(operator_arg: &str, from_model: Option<&str>) -> Result<String, ChatTemplateSourceError> {
    if !operator_arg.is_empty() {
        return resolve_chat_template_arg(operator_arg);
    }
    Ok(from_model.unwrap_or(super::CHATML_TEMPLATE).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_and_an_inline_template_is_taken_verbatim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.jinja");
        std::fs::write(&path, "{{ 'from file' }}").expect("write");
        let arg = path.to_str().expect("utf-8 path");
        assert_eq!(resolve_chat_template_arg(arg).expect("file"), "{{ 'from file' }}");
        assert_eq!(
            resolve_chat_template_arg("{{ 'a\\n' }}").expect("inline"),
            "{{ 'a\\n' }}"
        );
    }

    #[test]
    fn a_missing_file_and_an_empty_template_are_refused() {
        let err = resolve_chat_template_arg("/no/such/template.jinja").unwrap_err();
        assert!(matches!(err, ChatTemplateSourceError::Unreadable { .. }), "{err}");
        assert!(err.to_string().contains("/no/such/template.jinja"), "{err}");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.jinja");
        std::fs::write(&path, " \n").expect("write");
        let err = resolve_chat_template_arg(path.to_str().expect("utf-8 path")).unwrap_err();
        assert!(matches!(err, ChatTemplateSourceError::Empty), "{err}");
    }

    #[test]
    fn the_operator_template_wins_over_the_model_one() {
        assert_eq!(
            choose_chat_template("{{ 'op' }}", Some("{{ 'model' }}")).expect("op"),
            "{{ 'op' }}"
        );
        assert_eq!(
            choose_chat_template("", Some("{{ 'model' }}")).expect("model"),
            "{{ 'model' }}"
        );
        assert_eq!(
            choose_chat_template("", None).expect("chatml"),
            super::super::CHATML_TEMPLATE
        );
    }
}
