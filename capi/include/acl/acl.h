/*
 * hccl-rs: ACL's main header (acl/acl.h): aclInit / aclFinalize and the
 * runtime. As CANN's acl/acl.h, it includes the runtime header
 * (acl_rt.h, which includes acl_base.h); acl_prof.h is included too.
 */
#ifndef HCCL_RS_ACL_H_
#define HCCL_RS_ACL_H_

#include "acl_rt.h"
#include "acl_prof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the ACL API these headers describe (CANN's acl.h). */
#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 0
#define ACL_PATCH_VERSION 0

extern aclError aclInit(const char *configPath);
extern aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_H_ */
