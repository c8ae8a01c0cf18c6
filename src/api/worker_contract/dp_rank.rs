//! A request pinned to a data-parallel rank: vllm-router sends `X-data-parallel-rank` to the
//! ranks `/get_server_info`'s `dp_size` announced, and smg puts `data_parallel_rank` in the
//! body. A rank the server runs pins the request to that engine; any other is a 400 that
//! names it, so a router misconfigured for more ranks learns it at once instead of being
//! served by another engine. The header wins over the body when both are given. A rank whose
//! engine does not serve now (restarting its executor, or dead for good) is a 503 that names
//! it, which the routers retry, rather than a request left waiting on that engine.

use actix_web::HttpRequest;

use crate::api::engine_handle::EngineHandle;
use crate::api::errors::ApiError;
use crate::engine::health::EngineState;

pub const RANK_HEADER: &str = "x-data-parallel-rank";

/// The engine a request is pinned to (`None`: not pinned), from the header or the body's
/// rank (`body_rank`); a rank outside `0..dp_size` or a header that is no integer is refused.
pub fn pinned_rank(req: &HttpRequest, body_rank: Option<i64>, dp_size: usize) -> Result<Option<usize>, ApiError> {
    let header = match req.headers().get(RANK_HEADER) {
        None => None,
        Some(value) => {
            let text = value.to_str().unwrap_or("");
            match text.trim().parse::<i64>() {
                Ok(rank) => Some(in_range("X-data-parallel-rank", rank, dp_size)?),
                Err(_) => {
                    return Err(ApiError::invalid(
                        "X-data-parallel-rank",
                        format!("`X-data-parallel-rank` must be an integer rank, not {text:?}"),
                    ));
                }
            }
        }
    };
    let body = body_rank
        .map(|rank| in_range("data_parallel_rank", rank, dp_size))
        .transpose()?;
    Ok(header.or(body))
}

/// Refuses a request pinned to `rank` (one the server runs) while that engine does not serve.
pub fn check_serving(engine: &EngineHandle, rank: usize) -> Result<(), ApiError> {
    if engine.serves(rank) {
        return Ok(());
    }
    let why = match engine.state(rank) {
        EngineState::Dead(_) => "its engine is dead; send it to another rank".to_owned(),
        state => format!(
            "its engine is {}; retry shortly or send it to another rank",
            state.name()
        ),
    };
    Err(ApiError::Unavailable(format!(
        "data-parallel rank {rank} cannot serve requests now: {why}"
    )))
}

/// Refuses a rank the server does not run (the render endpoints, which run no engine).
pub fn check(req: &HttpRequest, body_rank: Option<i64>, dp_size: usize) -> Result<(), ApiError> {
    pinned_rank(req, body_rank, dp_size).map(|_| ())
}

fn in_range(param: &str, rank: i64, dp_size: usize) -> Result<usize, ApiError> {
    match usize::try_from(rank) {
        Ok(rank) if rank < dp_size => Ok(rank),
        _ => Err(ApiError::invalid(
            param,
            format!(
                "data-parallel rank {rank} does not exist: this server runs {dp_size} engine(s) \
                 (dp_size {dp_size}, ranks 0 to {})",
                dp_size - 1
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn rank_zero_or_none_passes_and_any_other_is_named() {
        let plain = TestRequest::default().to_http_request();
        assert!(check(&plain, None, 1).is_ok());
        assert!(check(&plain, Some(0), 1).is_ok());
        let err = check(&plain, Some(1), 1).unwrap_err();
        assert_eq!(err.param(), Some("data_parallel_rank"));
        assert!(err.to_string().contains("rank 1"), "{err}");
        let zero = TestRequest::default()
            .insert_header((RANK_HEADER, "0"))
            .to_http_request();
        assert!(check(&zero, None, 1).is_ok());
        let two = TestRequest::default()
            .insert_header((RANK_HEADER, "2"))
            .to_http_request();
        assert_eq!(check(&two, None, 1).unwrap_err().param(), Some("X-data-parallel-rank"));
        let junk = TestRequest::default()
            .insert_header((RANK_HEADER, "x"))
            .to_http_request();
        assert_eq!(check(&junk, None, 1).unwrap_err().param(), Some("X-data-parallel-rank"));
        assert!(check(&plain, Some(-1), 1).is_err());
    }

    #[test]
    fn a_rank_the_server_runs_pins_the_request_the_header_first() {
        let plain = TestRequest::default().to_http_request();
        assert_eq!(pinned_rank(&plain, None, 2).unwrap(), None);
        assert_eq!(pinned_rank(&plain, Some(1), 2).unwrap(), Some(1));
        let one = TestRequest::default()
            .insert_header((RANK_HEADER, "1"))
            .to_http_request();
        assert_eq!(pinned_rank(&one, Some(0), 2).unwrap(), Some(1));
        let err = pinned_rank(&plain, Some(2), 2).unwrap_err();
        assert!(err.to_string().contains("rank 2"), "{err}");
        assert!(err.to_string().contains("dp_size 2"), "{err}");
    }
}
