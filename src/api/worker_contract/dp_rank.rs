//! A request pinned to a data-parallel rank: vllm-router sends `X-data-parallel-rank` to the
//! ranks `/get_server_info`'s `dp_size` announced, and smg puts `data_parallel_rank` in the
//! body. kiln runs one engine (rank 0): rank 0 is served, any other is a 400 that names it, so
//! a router misconfigured for more ranks learns it at once instead of being served by rank 0.

use actix_web::HttpRequest;

use crate::api::errors::ApiError;

pub const RANK_HEADER: &str = "x-data-parallel-rank";

/// Refuses a rank other than 0 in the header or the body (`None`: none in the body).
pub fn check(req: &HttpRequest, body_rank: Option<i64>) -> Result<(), ApiError> {
    if let Some(value) = req.headers().get(RANK_HEADER) {
        let text = value.to_str().unwrap_or("");
        match text.trim().parse::<i64>() {
            Ok(0) => {}
            Ok(rank) => return Err(out_of_range("X-data-parallel-rank", rank)),
            Err(_) => {
                return Err(ApiError::invalid(
                    "X-data-parallel-rank",
                    format!("`X-data-parallel-rank` must be an integer rank, not {text:?}"),
                ));
            }
        }
    }
    match body_rank {
        None | Some(0) => Ok(()),
        Some(rank) => Err(out_of_range("data_parallel_rank", rank)),
    }
}

fn out_of_range(param: &str, rank: i64) -> ApiError {
    ApiError::invalid(
        param,
        format!("data-parallel rank {rank} does not exist: this server runs one engine (dp_size 1, rank 0)"),
    )
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn rank_zero_or_none_passes_and_any_other_is_named() {
        let plain = TestRequest::default().to_http_request();
        assert!(check(&plain, None).is_ok());
        assert!(check(&plain, Some(0)).is_ok());
        let err = check(&plain, Some(1)).unwrap_err();
        assert_eq!(err.param(), Some("data_parallel_rank"));
        assert!(err.to_string().contains("rank 1"), "{err}");
        let zero = TestRequest::default()
            .insert_header((RANK_HEADER, "0"))
            .to_http_request();
        assert!(check(&zero, None).is_ok());
        let two = TestRequest::default()
            .insert_header((RANK_HEADER, "2"))
            .to_http_request();
        assert_eq!(check(&two, None).unwrap_err().param(), Some("X-data-parallel-rank"));
        let junk = TestRequest::default()
            .insert_header((RANK_HEADER, "x"))
            .to_http_request();
        assert_eq!(check(&junk, None).unwrap_err().param(), Some("X-data-parallel-rank"));
        assert!(check(&plain, Some(-1)).is_err());
    }
}
