/*
 * error.c - making and reading the error reply's one shape (see error.h).
 */
#include "net/error.h"

json_t *cnl_http_error_body(const char *code, const char *message)
{
	return json_pack("{s:{s:s,s:s}}", "error", "code", code ? code : "",
	                 "message", message ? message : "");
}

bool cnl_http_error_read(const json_t *body, const char **ret_code,
                         const char **ret_message)
{
	json_t *e = json_object_get(body, "error");

	if (ret_code)
		*ret_code = json_string_value(json_object_get(e, "code"));
	if (ret_message)
		*ret_message = json_string_value(json_object_get(e, "message"));
	return json_is_object(e);
}
