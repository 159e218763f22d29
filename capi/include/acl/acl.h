/*
 * hccl-rs: ACL's main header (acl/acl.h): aclInit / aclFinalize and the
 * runtime. As CANN's acl/acl.h (8.1.RC1), it includes the runtime header
 * (acl_rt.h, which includes acl_base.h); acl_prof.h is included too. The
 * model and operator headers (acl_mdl.h, acl_op.h) are not provided.
 */
#ifndef HCCL_RS_ACL_H_
#define HCCL_RS_ACL_H_

#include "acl_rt.h"
#include "acl_prof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the ACL API these headers describe: CANN 8.1.RC1's acl.h
 * (ACL 1.13.0). */
#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 13
#define ACL_PATCH_VERSION 0

/* aclInit: a second call gives ACL_ERROR_REPEAT_INITIALIZE; the config
 * file is not read. aclFinalize: ACL_SUCCESS once (with or without
 * aclInit), ACL_ERROR_REPEAT_FINALIZE after that, as CANN's runtime. */
extern aclError aclInit(const char *configPath);
extern aclError aclFinalize(void);
/* This runtime's version (1.13.0, the ACL of the headers). */
extern aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);
/* The last failure message of this thread (empty if none). */
extern const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_H_ */
